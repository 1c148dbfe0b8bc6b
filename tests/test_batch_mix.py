"""Batch mixing: mixup, CutMix and the switch between them; targets that sum to 1 with label smoothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vidtx.config import TrainConfig
from vidtx.train.loss import (
    BatchMix,
    balanced_class_weights,
    classification_loss,
    mix_batch,
    multilabel_loss,
    smoothed_targets,
)


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


def test_focal_loss_is_cross_entropy_at_gamma_zero_and_weighs_easy_clips_less() -> None:
    logits = torch.tensor([[4.0, 0.0, 0.0], [0.0, 0.5, 0.0]])  # clip 0 is easy (p = 0.96), clip 1 hard
    labels = torch.tensor([0, 1])
    plain = F.cross_entropy(logits, labels)
    assert torch.allclose(classification_loss(logits, labels, 0.0), plain)
    assert torch.allclose(classification_loss(logits, labels, 0.0, focal_gamma=0.0), plain)
    focal = classification_loss(logits, labels, 0.0, focal_gamma=2.0)
    p = F.softmax(logits, dim=-1)[[0, 1], [0, 1]]  # each clip's probability of its label
    assert torch.allclose(focal, (-((1 - p) ** 2) * p.log()).mean())
    assert (1 - p[0]) ** 2 < 0.01 < (1 - p[1]) ** 2  # the easy clip's term nearly vanishes


def test_balanced_class_weights_count_every_class_alike() -> None:
    frequencies = torch.tensor([0.6, 0.3, 0.1, 0.0])
    weights = balanced_class_weights(frequencies)
    assert torch.allclose(weights[:3] * frequencies[:3], torch.full((3,), 0.25))  # 1 / K each
    assert weights[3] == weights[2]  # a class the stream lacks weighs as the rarest present one
    labels = torch.tensor([0, 2])
    logits = torch.zeros(2, 4)
    weighted = classification_loss(logits, labels, 0.0, class_weights=weights)
    assert torch.allclose(weighted, (weights[labels] * torch.log(torch.tensor(4.0))).mean())


def test_label_sets_are_smoothed_mixed_as_vectors_and_scored_by_a_sigmoid_each() -> None:
    sets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    smoothed = smoothed_targets(sets, 3, 0.3)
    assert torch.allclose(smoothed, torch.tensor([[0.8, 0.1, 0.8], [0.1, 0.8, 0.1]]))
    clips = constant_clips(2)
    mixed, targets = mix_batch(clips, sets, 3, BatchMix(mixup_alpha=0.4), 0.0, np.random.default_rng(1))
    # clip 0 (all 0) mixed with clip 1 (all 1) is their share v of clip 1 everywhere (0: its partner
    # is itself), and its target the same blend of the two label vectors
    share = mixed[0].flatten()[0].item()
    assert torch.allclose(targets[0], (1 - share) * sets[0] + share * sets[1], atol=1e-6)
    logits = torch.randn(2, 3)
    assert torch.allclose(multilabel_loss(logits, sets), F.binary_cross_entropy(torch.sigmoid(logits), sets))
