"""Clip-consistent augmentation and test-time crops.

Every frame of a clip gets the same crop and the same flip: a crop that moved from frame to frame
would add motion the video does not have. Frames arrive from the decoder as uint8 (T, H, W, 3); the
output is a float32 clip (C, T, H, W) normalised with the configured mean and std. Horizontal flip is
a switch because it turns "moving left" into "moving right".
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

Box = tuple[int, int, int, int]  # top, left, height, width


def random_resized_crop_box(
    height: int,
    width: int,
    scale: tuple[float, float],
    rng: np.random.Generator,
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> Box:
    """A box covering a random fraction `scale` of the frame area with a random aspect ratio."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        box_w = round(math.sqrt(target_area * aspect))
        box_h = round(math.sqrt(target_area / aspect))
        if 0 < box_w <= width and 0 < box_h <= height:
            top = int(rng.integers(0, height - box_h + 1))
            left = int(rng.integers(0, width - box_w + 1))
            return top, left, box_h, box_w
    side = min(height, width)  # rare: no sample fitted; fall back to the central square
    return (height - side) // 2, (width - side) // 2, side, side


def crop(clip: torch.Tensor, box: Box) -> torch.Tensor:
    top, left, box_h, box_w = box
    return clip[..., top : top + box_h, left : left + box_w]


def center_crop_box(height: int, width: int, size: int) -> Box:
    return (height - size) // 2, (width - size) // 2, size, size


def three_crop_boxes(height: int, width: int, size: int) -> list[Box]:
    """Start, centre and end crops along the longer side (together they cover the whole frame)."""
    if width >= height:
        top = (height - size) // 2
        return [(top, left, size, size) for left in (0, (width - size) // 2, width - size)]
    left = (width - size) // 2
    return [(top, left, size, size) for top in (0, (height - size) // 2, height - size)]


def normalize(clip: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """uint8 or [0, 255] float (T, C, H, W) -> float32 (x / 255 - mean) / std, in two passes."""
    std_t = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    shift = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1) / std_t
    return clip.to(torch.float32, copy=True).mul_(1.0 / (255.0 * std_t)).sub_(shift)


def to_tensor(frames: np.ndarray) -> torch.Tensor:
    """Decoded frames (T, H, W, 3) uint8 -> (T, 3, H, W) uint8 (a view, no copy)."""
    return torch.from_numpy(frames).permute(0, 3, 1, 2)


class TrainTransform:
    """Random resized crop to `crop_size`, optional horizontal flip, normalisation."""

    def __init__(
        self,
        crop_size: int,
        scale: tuple[float, float],
        horizontal_flip: bool,
        mean: tuple[float, float, float],
        std: tuple[float, float, float],
    ) -> None:
        self.crop_size, self.scale, self.horizontal_flip = crop_size, scale, horizontal_flip
        self.mean, self.std = mean, std

    def __call__(self, frames: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
        clip = to_tensor(frames)  # (T, C, H, W) uint8
        box = random_resized_crop_box(clip.shape[-2], clip.shape[-1], self.scale, rng)
        clip = normalize(crop(clip, box), self.mean, self.std)
        clip = F.interpolate(
            clip, size=(self.crop_size, self.crop_size), mode="bilinear", align_corners=False, antialias=True
        )  # (T, C, crop, crop)
        if self.horizontal_flip and rng.random() < 0.5:
            clip = clip.flip(-1)
        return clip.permute(1, 0, 2, 3).contiguous()  # (C, T, crop, crop)


class EvalTransform:
    """Centre crop (1 view) or 3-crop along the long side, normalised; frames are expected with the
    short side already at `crop_size` (the loader decodes them at that size)."""

    def __init__(
        self,
        crop_size: int,
        num_crops: int,
        mean: tuple[float, float, float],
        std: tuple[float, float, float],
    ) -> None:
        if num_crops not in (1, 3):
            raise ValueError(f"num_crops must be 1 or 3, got {num_crops}")
        self.crop_size, self.num_crops, self.mean, self.std = crop_size, num_crops, mean, std

    def __call__(self, frames: np.ndarray) -> torch.Tensor:
        clip = to_tensor(frames)  # (T, C, H, W) uint8
        height, width = clip.shape[-2:]
        if self.num_crops == 1:
            boxes = [center_crop_box(height, width, self.crop_size)]
        else:
            boxes = three_crop_boxes(height, width, self.crop_size)
        views = [normalize(crop(clip, box), self.mean, self.std) for box in boxes]
        return torch.stack(views).permute(0, 2, 1, 3, 4).contiguous()  # (crops, C, T, crop, crop)
