"""Resizing uint8 frames, for decoders that cannot scale to an arbitrary size and for augmentation."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def resize_frames(frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """uint8 (T, h, w, C) -> (T, height, width, C), antialiased bilinear. The frames go to
    F.interpolate as a channels-last view, which takes torch's uint8 SIMD path and returns
    channels-last memory: no copy on either side."""
    if frames.shape[1:3] == (height, width):
        return frames
    planes = frames.permute(0, 3, 1, 2)  # (T, C, h, w) with channels-last strides
    resized = F.interpolate(
        planes, size=(height, width), mode="bilinear", antialias=True, align_corners=False
    )
    return resized.permute(0, 2, 3, 1)  # (T, height, width, C)
