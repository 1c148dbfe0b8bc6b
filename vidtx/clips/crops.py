"""Test-time crops of uint8 clips (T, H, W, C): the centre, or three along the long side. Every frame of a
clip gets the same crop; training's random crops are in `vidtx.data.transforms` and share `crop`."""

from __future__ import annotations

import numpy as np
import torch

Box = tuple[int, int, int, int]  # top, left, height, width


def crop(clip: torch.Tensor, box: Box) -> torch.Tensor:
    """The box of every frame of a clip (T, H, W, C): a view, no copy."""
    top, left, box_h, box_w = box
    return clip[:, top : top + box_h, left : left + box_w]


def center_crop_box(height: int, width: int, size: int) -> Box:
    return (height - size) // 2, (width - size) // 2, size, size


def three_crop_boxes(height: int, width: int, size: int) -> list[Box]:
    """Start, centre and end crops along the longer side (together they cover the whole frame)."""
    if width >= height:
        top = (height - size) // 2
        return [(top, left, size, size) for left in (0, (width - size) // 2, width - size)]
    left = (width - size) // 2
    return [(top, left, size, size) for top in (0, (height - size) // 2, height - size)]


class EvalTransform:
    """Centre crop (1 view) or 3-crop along the long side: uint8 frames (T, H, W, C), with the short
    side already at `crop_size` (the loader decodes them at that size), -> (crops, T, crop, crop, C)."""

    def __init__(self, crop_size: int, num_crops: int) -> None:
        if num_crops not in (1, 3):
            raise ValueError(f"num_crops must be 1 or 3, got {num_crops}")
        self.crop_size, self.num_crops = crop_size, num_crops

    def __call__(self, frames: np.ndarray | torch.Tensor) -> torch.Tensor:
        clip = torch.as_tensor(frames)  # (T, H, W, C) uint8
        height, width = clip.shape[1:3]
        if self.num_crops == 1:
            boxes = [center_crop_box(height, width, self.crop_size)]
        else:
            boxes = three_crop_boxes(height, width, self.crop_size)
        return torch.stack([crop(clip, box) for box in boxes])  # (crops, T, crop, crop, C)
