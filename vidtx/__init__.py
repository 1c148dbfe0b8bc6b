"""vidtx: a training pipeline for video transformers (X-ViT and baselines)."""

__version__ = "0.1.0"
