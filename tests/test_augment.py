"""The paper's clip augmentations: one draw per clip, the same change on every frame."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vidtx.config import DataConfig
from vidtx.data.augment import IMAGENET_POLICY, auto_augment, rand_augment, random_erasing
from vidtx.data.transforms import TrainTransform, scale_jitter_box


def repeated_frame_clip(frames: int = 4) -> torch.Tensor:
    """Every frame the same textured picture: uint8 (T, 32, 40, 3)."""
    rng = np.random.default_rng(1)
    frame = rng.integers(0, 256, (32, 40, 3), dtype=np.uint8)
    return torch.from_numpy(np.repeat(frame[None], frames, axis=0))


def test_auto_augment_applies_one_sub_policy_to_every_frame() -> None:
    clip, changed = repeated_frame_clip(), 0
    for seed in range(40):
        augmented = auto_augment(clip, np.random.default_rng(seed))
        assert augmented.shape == clip.shape
        assert augmented.dtype == torch.uint8
        assert all(torch.equal(augmented[t], augmented[0]) for t in range(1, 4))  # the same op on every frame
        changed += not torch.equal(augmented, clip)
    assert changed > 20  # most draws change the picture
    assert len(IMAGENET_POLICY) == 25


def test_random_erasing_erases_the_same_box_of_every_frame() -> None:
    clip = torch.zeros(3, 32, 40, 3, dtype=torch.uint8) + 128
    erased = random_erasing(clip, np.random.default_rng(0))
    changed = (erased != clip).any(dim=-1)  # (T, H, W)
    assert all(torch.equal(changed[t], changed[0]) for t in range(1, 3))
    fraction = changed[0].float().mean().item()
    assert 0.02 * 0.9 < fraction <= 1 / 3
    assert not torch.equal(erased[0], erased[1])  # fresh noise in every frame, the box is shared


def test_scale_jitter_crops_a_square_of_crop_over_the_scale() -> None:
    rng = np.random.default_rng(0)
    sides = [scale_jitter_box(256, 341, 224, (0.9, 1.3), rng)[2] for _ in range(300)]
    assert min(sides) >= round(224 / 1.3)
    assert max(sides) <= 249
    top, _left, height, width = scale_jitter_box(100, 120, 224, (0.9, 1.3), rng)
    assert (height, width) == (100, 100)
    assert top == 0


def test_the_paper_recipe_from_the_config() -> None:
    cfg = DataConfig(crop_size=32, short_side=40, crop="scale_jitter", auto_augment=True, random_erasing=1.0)
    transform = TrainTransform.from_config(cfg)
    clip = transform(repeated_frame_clip().numpy(), np.random.default_rng(0))
    assert clip.shape == (4, 32, 32, 3)
    with pytest.raises(ValueError, match="crop"):
        DataConfig(crop="center")


def test_rand_augment_applies_its_operations_to_every_frame_alike() -> None:
    clip, changed = repeated_frame_clip(), 0
    for seed in range(20):
        augmented = rand_augment(clip, magnitude=7, num_ops=2, rng=np.random.default_rng(seed))
        assert augmented.shape == clip.shape
        assert augmented.dtype == torch.uint8
        assert all(torch.equal(augmented[t], augmented[0]) for t in range(1, 4))
        changed += not torch.equal(augmented, clip)
    assert changed >= 18  # two operations at magnitude 7 nearly always change the picture


def test_rand_augment_from_the_config_and_one_policy_at_a_time() -> None:
    cfg = DataConfig(crop_size=32, short_side=40, rand_augment={"magnitude": 9, "num_ops": 4})
    clip = TrainTransform.from_config(cfg)(repeated_frame_clip().numpy(), np.random.default_rng(0))
    assert clip.shape == (4, 32, 32, 3)
    assert all(torch.equal(clip[t], clip[0]) for t in range(1, 4))
    with pytest.raises(ValueError, match="rand_augment"):
        DataConfig(auto_augment=True, rand_augment={})
    with pytest.raises(ValueError, match="magnitude"):
        DataConfig(rand_augment={"magnitude": 11})
