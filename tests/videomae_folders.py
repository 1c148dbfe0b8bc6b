"""A VideoMAE checkpoint as people download it, made here: Hugging Face's own model at a small config
(nothing downloaded), saved as `save_pretrained` does."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import VideoMAEConfig, VideoMAEForPreTraining

# videomae_tiny's sizes, and the decoder a test pretrains with
DECODER = ["pretrain.decoder_depth=1", "pretrain.decoder_width=32", "pretrain.decoder_heads=2"]


def videomae_pretraining_folder(folder: Path) -> Path:
    """Hugging Face's `VideoMAEForPreTraining` of videomae_tiny's sizes (and `DECODER`'s) at 4 frames
    of 32 px, saved into `folder` as `MCG-NJU/videomae-base` is downloaded (a final norm, no mean
    pooling)."""
    torch.manual_seed(0)
    config = VideoMAEConfig(image_size=32, patch_size=8, num_frames=4, tubelet_size=2, hidden_size=96,
                            num_hidden_layers=4, num_attention_heads=4, intermediate_size=384,
                            decoder_hidden_size=32, decoder_num_hidden_layers=1, decoder_num_attention_heads=2,
                            decoder_intermediate_size=128, use_mean_pooling=False)  # fmt: skip
    VideoMAEForPreTraining(config).save_pretrained(folder)
    return folder
