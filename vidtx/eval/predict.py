"""One video to class scores with evaluation's own steps: decode at the crop's short side, the
multi-view test protocol (`vidtx.data.video.test_views`), the one normalisation, the model.

`vidtx.eval.multiview` runs the same `view_logits` on a shard's views and the served model
(`vidtx.serving`) on the videos it is sent, so the two agree for the same encoded video.
"""

from __future__ import annotations

import torch
from torch import nn

from vidtx.config import DataConfig
from vidtx.data.transforms import normalize_clips
from vidtx.data.video import open_encoded, test_views
from vidtx.media.decode import probe_video


def video_views(payload: bytes, data: DataConfig, num_clips: int, num_crops: int) -> torch.Tensor:
    """The test views of an encoded video: uint8 (num_clips * num_crops, T, crop, crop, C)."""
    info = probe_video(payload)
    video = open_encoded(payload, (info.width, info.height), data.crop_size, data.decode_threads)
    return test_views(video, data, num_clips, num_crops)


@torch.no_grad()
def view_logits(model: nn.Module, data: DataConfig, views: torch.Tensor) -> torch.Tensor:
    """Float32 logits (N, K) of uint8 clips (N, T, H, W, C), normalised on the model's device."""
    weights = next(model.parameters())
    clips = normalize_clips(views.to(weights.device, non_blocking=True), data.mean, data.std, weights.dtype)
    return model(clips).float()  # clips (N, C, T, H, W) -> (N, K)
