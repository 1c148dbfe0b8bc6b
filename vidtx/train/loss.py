"""Batch mixing (mixup, CutMix, and the switch between them) and the loss that takes hard or soft targets.

Soft targets carry the label smoothing themselves (timm's convention): each row is a probability
distribution that sums to 1, smoothed first and mixed second, so the loss of a mixed batch is a plain
soft cross entropy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from vidtx.config import TrainConfig


@dataclass(frozen=True)
class BatchMix:
    """How a training batch is mixed: `mixup_alpha` and `cutmix_alpha` are Beta(alpha, alpha)
    parameters (0: off); with both on, CutMix is drawn for a batch with probability `switch_prob`."""

    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    switch_prob: float = 0.5

    @classmethod
    def from_config(cls, train: TrainConfig) -> BatchMix:
        return cls(train.mixup_alpha, train.cutmix_alpha, train.mix_switch_prob)

    @property
    def enabled(self) -> bool:
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0

    def uses_cutmix(self, rng: np.random.Generator) -> bool:
        """Whether this batch gets CutMix (one draw per batch, as timm's Mixup)."""
        if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
            return bool(rng.random() < self.switch_prob)
        return self.cutmix_alpha > 0


def smoothed_targets(labels: torch.Tensor, num_classes: int, smoothing: float) -> torch.Tensor:
    """labels (B,) -> rows (B, num_classes) of 1 - smoothing + smoothing / K on the label and
    smoothing / K elsewhere (what `F.cross_entropy(label_smoothing=...)` builds)."""
    off = smoothing / num_classes
    return F.one_hot(labels, num_classes).float() * (1.0 - smoothing) + off


def cutmix_box(height: int, width: int, area: float, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """A box (top, left, box height, box width) of about `area` of the frame, its centre uniform over
    the frame and its edges clipped to it (Yun et al. 2019)."""
    ratio = math.sqrt(area)
    cut_h, cut_w = int(height * ratio), int(width * ratio)
    cy, cx = int(rng.integers(height)), int(rng.integers(width))
    top, bottom = np.clip([cy - cut_h // 2, cy + cut_h // 2], 0, height)
    left, right = np.clip([cx - cut_w // 2, cx + cut_w // 2], 0, width)
    return int(top), int(left), int(bottom - top), int(right - left)


def mix_batch(
    clips: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    mix: BatchMix,
    smoothing: float,
    rng: np.random.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mix each clip with a partner from the same batch: mixup blends whole clips, CutMix pastes the
    partner's box into the clip, the same box in every frame (a box that moved would add motion).

    clips (B, C, T, H, W), labels (B,) -> mixed clips (B, C, T, H, W), soft targets (B, num_classes)
    whose rows sum to 1. One weight per batch; CutMix's weight is the area actually kept.
    """
    partner = torch.from_numpy(rng.permutation(clips.shape[0])).to(clips.device)
    targets = smoothed_targets(labels, num_classes, smoothing)
    if mix.uses_cutmix(rng):
        height, width = clips.shape[-2:]
        top, left, box_h, box_w = cutmix_box(
            height, width, 1.0 - float(rng.beta(mix.cutmix_alpha, mix.cutmix_alpha)), rng
        )
        mixed = clips.clone()
        mixed[..., top : top + box_h, left : left + box_w] = clips[partner][
            ..., top : top + box_h, left : left + box_w
        ]
        weight = 1.0 - box_h * box_w / (height * width)
    else:
        weight = float(rng.beta(mix.mixup_alpha, mix.mixup_alpha))
        mixed = weight * clips + (1.0 - weight) * clips[partner]
    return mixed, weight * targets + (1.0 - weight) * targets[partner]


def classification_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """Cross entropy in fp32: integer labels (B,) are smoothed by `label_smoothing`; soft targets
    (B, K), from `mix_batch`, are already smoothed."""
    if targets.is_floating_point():
        return F.cross_entropy(logits.float(), targets)
    return F.cross_entropy(logits.float(), targets, label_smoothing=label_smoothing)
