"""Batch mixing: mixup, CutMix and the switch between them; targets that sum to 1 with label smoothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidtx.config import TrainConfig
from vidtx.train.loss import BatchMix, classification_loss, mix_batch, smoothed_targets


def constant_clips(batch: int = 4) -> torch.Tensor:
    """Clip i is the value i everywhere: (B, 3, 2, 8, 8)."""
    return (
        torch.arange(batch, dtype=torch.float32)
        .view(batch, 1, 1, 1, 1)
        .expand(batch, 3, 2, 8, 8)
        .contiguous()
    )


def test_mixup_blends_clips_and_targets_with_one_weight() -> None:
    clips, labels = constant_clips(), torch.tensor([0, 1, 2, 3])
    mixed, targets = mix_batch(clips, labels, 4, BatchMix(mixup_alpha=0.4), 0.0, np.random.default_rng(0))
    assert targets.shape == (4, 4)
    assert torch.allclose(targets.sum(dim=1), torch.ones(4))
    # each mixed clip is w * own + (1 - w) * partner, and its target puts the same weights on the labels
    for i in range(4):
        expected = (targets[i] * torch.arange(4.0)).sum()
        assert torch.allclose(mixed[i], torch.full_like(mixed[i], expected.item()), atol=1e-6)


def test_cutmix_pastes_one_box_into_every_frame_and_weighs_targets_by_its_area() -> None:
    clips, labels = constant_clips(), torch.tensor([0, 1, 2, 3])
    for seed in range(20):
        mixed, targets = mix_batch(
            clips, labels, 4, BatchMix(cutmix_alpha=1.0), 0.0, np.random.default_rng(seed)
        )
        assert torch.allclose(targets.sum(dim=1), torch.ones(4))
        for i in range(4):
            pasted = mixed[i] != clips[i]  # (C, T, H, W): where the partner's pixels are
            assert torch.equal(pasted[:, 0], pasted[:, 1])
            assert torch.equal(pasted[0], pasted[2])
            values = set(mixed[i].unique().tolist())
            assert values <= {float(i), *(targets[i].nonzero().flatten().float().tolist())}
            partner_share = pasted[0, 0].float().mean().item()
            if partner_share:  # the target's weight on the partner is the area pasted
                partner = int(mixed[i][pasted][0].item())
                assert targets[i, partner].item() == pytest.approx(partner_share, abs=1e-6)
            assert targets[i, i].item() == pytest.approx(1 - partner_share, abs=1e-6)


def test_the_switch_draws_cutmix_with_its_probability() -> None:
    rng = np.random.default_rng(0)
    mix = BatchMix(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5)
    share = np.mean([mix.uses_cutmix(rng) for _ in range(4000)])
    assert share == pytest.approx(0.5, abs=0.03)  # 4 standard errors
    assert not BatchMix(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.0).uses_cutmix(rng)
    assert BatchMix(cutmix_alpha=1.0, switch_prob=0.0).uses_cutmix(rng)  # CutMix alone: always
    assert BatchMix.from_config(
        TrainConfig(mixup_alpha=0.8, cutmix_alpha=1.0, mix_switch_prob=0.3)
    ) == BatchMix(0.8, 1.0, 0.3)


@pytest.mark.parametrize("cutmix", [False, True])
def test_mixed_targets_with_label_smoothing_sum_to_one(cutmix: bool) -> None:
    labels = torch.tensor([0, 1, 2, 3, 4, 0])
    mix = BatchMix(mixup_alpha=0.0 if cutmix else 0.8, cutmix_alpha=1.0 if cutmix else 0.0)
    _, targets = mix_batch(torch.randn(6, 3, 2, 8, 8), labels, 7, mix, 0.1, np.random.default_rng(3))
    assert torch.allclose(targets.sum(dim=1), torch.ones(6))
    assert targets.min().item() >= 0.1 / 7 - 1e-7  # every class keeps its smoothing share


def test_the_loss_smooths_hard_labels_and_takes_smoothed_soft_targets_as_they_are() -> None:
    logits = torch.randn(3, 5, dtype=torch.bfloat16)
    labels = torch.tensor([0, 4, 2])
    hard = classification_loss(logits, labels, label_smoothing=0.1)
    soft = classification_loss(logits, smoothed_targets(labels, 5, 0.1), label_smoothing=0.1)
    assert hard.dtype == torch.float32
    assert torch.allclose(hard, soft)
