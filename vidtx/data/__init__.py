"""Video data: dataset sources, a synthetic motion dataset, WebDataset sharding, decoding, loading."""
