"""Training's clip-consistent augmentation in uint8 (test-time crops and the one normalisation are in
`vidtx.clips`, which the served model loads without this module).

Clips stay uint8 in the decoders' layout, (T, H, W, C), from the decoder to the device: the CPU only
crops, resizes (uint8, antialiased bilinear) and flips; `vidtx.clips.normalize.normalize_clips` turns
a batch into the model's float (B, C, T, H, W) on the device, at the start of the training step, in
evaluation and in predict. Every frame of a clip gets the same crop and the same flip: a crop that moved from frame
to frame would add motion the video does not have. Horizontal flip is a switch because it turns
"moving left" into "moving right".
"""

from __future__ import annotations

import math

import numpy as np
import torch

from vidtx.clips.crops import Box, crop
from vidtx.config import CropMode, DataConfig, RandAugmentConfig
from vidtx.data.augment import auto_augment, rand_augment, random_erasing
from vidtx.media.resize import resize_frames


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


def scale_jitter_box(
    height: int, width: int, crop_size: int, scale: tuple[float, float], rng: np.random.Generator
) -> Box:
    """The paper's "random scaling and cropping": the frame scaled by s in `scale`, then a random
    crop_size square; as a box of the unscaled frame, a square of side crop_size / s."""
    side = min(round(crop_size / rng.uniform(*scale)), height, width)
    return int(rng.integers(0, height - side + 1)), int(rng.integers(0, width - side + 1)), side, side


class TrainTransform:
    """The training augmentation of a clip, uint8 frames (T, H, W, C) -> uint8 (T, crop, crop, C): a
    random resized crop (area fraction `scale`, aspect 3/4-4/3) or the paper's scale jitter and crop,
    an optional horizontal flip, then optionally AutoAugment or RandAugment and random erasing
    (`vidtx.data.augment`), all with one draw per clip."""

    def __init__(
        self,
        crop_size: int,
        scale: tuple[float, float],
        horizontal_flip: bool,
        *,
        crop: CropMode = "random_resized",
        scale_jitter: tuple[float, float] = (0.9, 1.3),
        auto_augment: bool = False,
        rand_augment: RandAugmentConfig | None = None,
        random_erasing: float = 0.0,
    ) -> None:
        self.crop_size, self.scale, self.horizontal_flip = crop_size, scale, horizontal_flip
        self.crop, self.scale_jitter = crop, scale_jitter
        self.auto_augment, self.rand_augment, self.random_erasing = auto_augment, rand_augment, random_erasing

    @classmethod
    def from_config(cls, cfg: DataConfig) -> TrainTransform:
        return cls(
            cfg.crop_size,
            cfg.scale_range,
            cfg.horizontal_flip,
            crop=cfg.crop,
            scale_jitter=cfg.scale_jitter,
            auto_augment=cfg.auto_augment,
            rand_augment=cfg.rand_augment,
            random_erasing=cfg.random_erasing,
        )

    def __call__(self, frames: np.ndarray | torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        clip = torch.as_tensor(frames)  # (T, H, W, C) uint8, no copy
        height, width = clip.shape[1:3]
        if self.crop == "scale_jitter":
            box = scale_jitter_box(height, width, self.crop_size, self.scale_jitter, rng)
        else:
            box = random_resized_crop_box(height, width, self.scale, rng)
        clip = resize_frames(crop(clip, box), self.crop_size, self.crop_size)  # (T, crop, crop, C)
        if self.horizontal_flip and rng.random() < 0.5:
            clip = clip.flip(2)
        if self.auto_augment:
            clip = auto_augment(clip.contiguous(), rng)
        if self.rand_augment is not None:
            clip = rand_augment(
                clip.contiguous(), self.rand_augment.magnitude, self.rand_augment.num_ops, rng
            )
        if self.random_erasing and rng.random() < self.random_erasing:
            clip = random_erasing(clip, rng)
        return clip
