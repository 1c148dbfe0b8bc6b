"""Mixup on clip batches and the loss that takes hard or soft targets."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def mixup(
    clips: torch.Tensor, labels: torch.Tensor, num_classes: int, alpha: float, rng: np.random.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Blend each clip with a partner from the same batch (Zhang et al. 2018).

    clips (B, C, T, H, W), labels (B,) -> mixed clips (B, C, T, H, W), soft targets (B, num_classes).
    One mixing weight per batch, drawn from Beta(alpha, alpha), as in timm and the X-ViT recipe.
    """
    weight = float(rng.beta(alpha, alpha))
    partner = torch.from_numpy(rng.permutation(clips.shape[0]))
    mixed = weight * clips + (1.0 - weight) * clips[partner]
    targets = F.one_hot(labels, num_classes).float()
    return mixed, weight * targets + (1.0 - weight) * targets[partner]


def classification_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """Cross entropy in fp32 for integer labels (B,) or soft targets (B, K)."""
    return F.cross_entropy(logits.float(), targets, label_smoothing=label_smoothing)
