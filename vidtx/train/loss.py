"""Batch mixing (mixup, CutMix, and the switch between them) and the losses that take hard or soft targets:
softmax cross entropy (optionally focal, optionally weighted per class) for one label per clip, and
binary cross entropy with a sigmoid per class for label sets.

Soft targets carry the label smoothing themselves (timm's convention): a row is smoothed first and mixed
second, so the loss of a mixed batch is a plain soft cross entropy. A single label's row sums to 1; a
label set's row holds a 1 per label before smoothing (mixing blends two clips' label vectors, as timm
mixes multi-hot targets for its binary cross entropy).
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
    """labels (B,), or label sets as multi-hot rows (B, num_classes) -> rows (B, num_classes) of
    1 - smoothing + smoothing / K on each label and smoothing / K elsewhere (for one label, what
    `F.cross_entropy(label_smoothing=...)` builds)."""
    hot = labels.float() if labels.is_floating_point() else F.one_hot(labels, num_classes).float()
    return hot * (1.0 - smoothing) + smoothing / num_classes


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

    clips (B, C, T, H, W), labels (B,) or label sets (B, num_classes) -> mixed clips (B, C, T, H, W),
    soft targets (B, num_classes) (for single labels, rows that sum to 1). One weight per batch;
    CutMix's weight is the area actually kept.
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


def classification_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    label_smoothing: float,
    *,
    class_weights: torch.Tensor | None = None,
    focal_gamma: float = 0.0,
) -> torch.Tensor:
    """Softmax cross entropy in fp32, the mean over clips: integer labels (B,) are smoothed by
    `label_smoothing`; soft targets (B, K), from `mix_batch`, are already smoothed.

    With `focal_gamma` > 0 each class's term -t_k log p_k is scaled by (1 - p_k)^gamma (focal loss,
    Lin et al. 2017; for a hard label, its one term); `class_weights` (K,) scales each class's term.
    """
    rows = (
        targets
        if targets.is_floating_point()
        else smoothed_targets(targets, logits.shape[-1], label_smoothing)
    )
    log_probabilities = F.log_softmax(logits.float(), dim=-1)  # (B, K)
    terms = -rows * log_probabilities
    if focal_gamma > 0:
        terms = terms * (1.0 - log_probabilities.exp()).pow(focal_gamma)
    if class_weights is not None:
        terms = terms * class_weights.to(terms.device)
    return terms.sum(dim=-1).mean()


def multilabel_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Binary cross entropy of a sigmoid per class, in fp32: logits (B, K), targets (B, K) in [0, 1]
    (label sets as smoothed, maybe mixed rows from `smoothed_targets` / `mix_batch`); the mean over
    clips and classes."""
    return F.binary_cross_entropy_with_logits(logits.float(), targets)


def balanced_class_weights(frequencies: torch.Tensor) -> torch.Tensor:
    """`train.class_weights: balanced`: (K,) share of each class in the training stream -> weight
    1 / (K x share), so that the weighted stream counts every class alike and its mean weight is 1
    (scikit-learn's "balanced"); a class absent from the stream weighs as the rarest present one."""
    present = frequencies[frequencies > 0]
    floor = present.min() if len(present) else torch.tensor(1.0)
    return 1.0 / (len(frequencies) * frequencies.clamp_min(floor))
