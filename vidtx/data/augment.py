"""Clip augmentations: the X-ViT recipe's AutoAugment and random erasing (paper, section 4.1), and the
RandAugment of VideoMAE's fine-tuning recipe.

Each acts on a whole uint8 clip (T, H, W, C) with one random draw per clip: every frame gets the same
operations with the same magnitudes, and the same erased box, since a change that differed from
frame to frame would add motion the video does not have. AutoAugment is the ImageNet policy
(Cubuk et al. 2019: 25 sub-policies of two operations, each applied with its probability at its
magnitude on a 0-9 scale); RandAugment (Cubuk et al. 2020) applies `num_ops` operations drawn
uniformly at one magnitude on timm's 0-10 scale. Pillow does each operation on each frame
(torchvision, whose v2 transforms take video tensors, does not install beside this project's CPU torch).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageOps

Operation = tuple[str, float, int]  # (name, probability, magnitude 0-9)

IMAGENET_POLICY: tuple[tuple[Operation, Operation], ...] = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
    (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, 4), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, 7)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, 2)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, 8), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, 2)),
    (("Equalize", 0.0, 7), ("Equalize", 0.8, 8)),
    (("Invert", 0.6, 4), ("Equalize", 1.0, 8)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, 8)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, 9)),
    (("Color", 0.4, 0), ("Equalize", 0.6, 3)),
    (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
    (("Invert", 0.6, 4), ("Equalize", 1.0, 8)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)),
)


def _affine(image: Image.Image, matrix: tuple[float, ...]) -> Image.Image:
    return image.transform(image.size, Image.Transform.AFFINE, matrix, Image.Resampling.BILINEAR, fillcolor=0)


RAND_AUGMENT_OPS = (  # timm's RandAugment list, SolarizeAdd aside
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color",
    "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY",
)  # fmt: skip


def _operation(
    name: str, level: float, sign: float, size: tuple[int, int]
) -> Callable[[Image.Image], Image.Image]:
    """The operation at strength `level` (0-1), signed by `sign` where the operation has a direction."""
    width, height = size
    shear, shift, enhance = sign * 0.3 * level, sign * 150 / 331 * level, 1 + sign * 0.9 * level
    operations: dict[str, Callable[[Image.Image], Image.Image]] = {
        "ShearX": lambda image: _affine(image, (1, shear, 0, 0, 1, 0)),
        "ShearY": lambda image: _affine(image, (1, 0, 0, shear, 1, 0)),
        "TranslateX": lambda image: _affine(image, (1, 0, shift * width, 0, 1, 0)),
        "TranslateY": lambda image: _affine(image, (1, 0, 0, 0, 1, shift * height)),
        "Rotate": lambda image: image.rotate(sign * 30 * level, Image.Resampling.BILINEAR, fillcolor=0),
        "Color": lambda image: ImageEnhance.Color(image).enhance(enhance),
        "Contrast": lambda image: ImageEnhance.Contrast(image).enhance(enhance),
        "Brightness": lambda image: ImageEnhance.Brightness(image).enhance(enhance),
        "Sharpness": lambda image: ImageEnhance.Sharpness(image).enhance(enhance),
        "Posterize": lambda image: ImageOps.posterize(image, 8 - round(4 * level)),
        "Solarize": lambda image: ImageOps.solarize(image, round(255 * (1 - level))),
        "AutoContrast": ImageOps.autocontrast,
        "Equalize": ImageOps.equalize,
        "Invert": ImageOps.invert,
    }
    return operations[name]


def _sign(rng: np.random.Generator) -> float:
    return 1.0 if rng.random() < 0.5 else -1.0


def auto_augment(clip: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """One ImageNet AutoAugment sub-policy, drawn for the clip, on every frame: uint8 (T, H, W, C)."""
    policy = IMAGENET_POLICY[int(rng.integers(len(IMAGENET_POLICY)))]
    size = (clip.shape[2], clip.shape[1])
    chosen = [
        _operation(name, magnitude / 9, _sign(rng), size)
        for name, probability, magnitude in policy
        if rng.random() < probability
    ]
    return _apply(clip, chosen)


def rand_augment(
    clip: torch.Tensor, magnitude: float, num_ops: int, rng: np.random.Generator
) -> torch.Tensor:
    """RandAugment: `num_ops` operations drawn for the clip (with replacement) at `magnitude` (0-10),
    on every frame: uint8 (T, H, W, C)."""
    size = (clip.shape[2], clip.shape[1])
    names = rng.choice(len(RAND_AUGMENT_OPS), size=num_ops)
    return _apply(clip, [_operation(RAND_AUGMENT_OPS[i], magnitude / 10, _sign(rng), size) for i in names])


def _apply(clip: torch.Tensor, chosen: list[Callable[[Image.Image], Image.Image]]) -> torch.Tensor:
    """The `chosen` operations, in order, on each frame of the uint8 clip (T, H, W, C)."""
    if not chosen:
        return clip
    frames = []
    for frame in clip.numpy():
        image = Image.fromarray(frame)
        for operation in chosen:
            image = operation(image)
        frames.append(np.asarray(image))
    return torch.from_numpy(np.stack(frames))


def random_erasing(
    clip: torch.Tensor,
    rng: np.random.Generator,
    area: tuple[float, float] = (0.02, 1 / 3),
    aspect: tuple[float, float] = (0.3, 1 / 0.3),
) -> torch.Tensor:
    """Noise in one random box (a fraction `area` of the frame, aspect ratio in `aspect`), the same
    box on every frame of the uint8 clip (T, H, W, C) (Zhong et al. 2020; the X-ViT SSv2 recipe)."""
    height, width = clip.shape[1:3]
    for _ in range(10):
        target = height * width * rng.uniform(*area)
        ratio = math.exp(rng.uniform(math.log(aspect[0]), math.log(aspect[1])))
        box_h, box_w = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < box_h < height and 0 < box_w < width:
            top, left = int(rng.integers(0, height - box_h)), int(rng.integers(0, width - box_w))
            erased = clip.clone()
            noise = rng.integers(0, 256, (clip.shape[0], box_h, box_w, clip.shape[3]), dtype=np.uint8)
            erased[:, top : top + box_h, left : left + box_w] = torch.from_numpy(noise)
            return erased
    return clip
