"""The read side: shards into training and evaluation batches (the loaders, which samples each rank
reads, mixing sources, caching and fetching from a bucket, a rank's place in its epoch, training's
augmentation)."""
