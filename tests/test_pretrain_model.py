"""The masked autoencoder (`vidtx.models.mae`, `vidtx.models.masking`): what it hides, what its encoder
sees, what its loss counts, and the settings it refuses (in one line naming them)."""

from __future__ import annotations

import pytest
import torch

from vidtx.config import ConfigError, load_config
from vidtx.model_factory import check_pretrain_config
from vidtx.models import create_model
from vidtx.models.mae import MaskedAutoencoder, encoder_state
from vidtx.models.masking import sample_mask, visible_count, visible_indices

FRAMES, SIZE, PATCH = 4, 32, 8  # the tiny presets: 4 steps of 16 patches, 64 tokens


def autoencoder(name: str, masking: str = "tube", ratio: float = 0.75) -> MaskedAutoencoder:
    torch.manual_seed(0)
    encoder = create_model(name, num_classes=3, num_frames=FRAMES, img_size=SIZE)
    return MaskedAutoencoder(
        encoder, mask_ratio=ratio, masking=masking, decoder_depth=1, decoder_dim=32, decoder_heads=2
    ).eval()


def test_a_tube_mask_hides_the_same_positions_in_every_frame_and_random_does_not() -> None:
    generator = torch.Generator().manual_seed(0)
    tube = sample_mask(8, FRAMES, 16, 0.75, "tube", generator).view(8, FRAMES, 16)
    assert bool((tube == tube[:, :1]).all())
    assert tube.sum(dim=(1, 2)).tolist() == [12 * FRAMES] * 8  # 12 of 16 positions, at every step
    assert len({tuple(clip[0].tolist()) for clip in tube}) > 1  # each clip draws its own positions
    spread = sample_mask(8, FRAMES, 16, 0.75, "random", generator).view(8, FRAMES, 16)
    assert spread.sum(dim=(1, 2)).tolist() == [48] * 8
    assert not bool((spread == spread[:, :1]).all())
    assert visible_indices(tube.flatten(1)).shape == (8, 4 * FRAMES)
    with pytest.raises(ValueError, match="leaves no visible token"):
        visible_count("tube", FRAMES, 16, 0.97)  # 16 x 0.03 rounds to no position


@pytest.mark.parametrize("name", ["joint_tiny", "xvit_tiny", "timesformer_tiny"])
def test_the_encoder_sees_only_the_visible_tokens(name: str) -> None:
    """Its blocks get the class token(s) and the visible patches only, and no pixel of a hidden patch
    reaches the features of the visible ones."""
    model = autoencoder(name)
    clips = torch.randn(2, 3, FRAMES, SIZE, SIZE)
    mask = sample_mask(2, FRAMES, 16, 0.75, "tube", torch.Generator().manual_seed(1))
    lengths = []
    hook = model.encoder.blocks[0].register_forward_pre_hook(lambda _, args: lengths.append(args[0].shape[1]))
    visible = visible_indices(mask)
    features = model.encoder.encode_visible(clips, visible)
    hook.remove()
    assert features.shape == (2, 4 * FRAMES, model.encoder.embed_dim)  # 4 positions x 4 steps
    per_sequence = 1 + 4 if name == "xvit_tiny" else 1 + 4 * FRAMES  # per frame, or the whole clip
    assert lengths == [per_sequence]
    pixels = model.patchify(clips)  # (B, T'·N, P): change every hidden patch's pixels
    changed = model.unpatchify(torch.where(mask[..., None], torch.randn_like(pixels), pixels))
    assert torch.equal(model.encoder.encode_visible(changed, visible), features)


def test_the_loss_counts_the_hidden_patches_only() -> None:
    model = autoencoder("joint_tiny", "random")
    clips = torch.randn(2, 3, FRAMES, SIZE, SIZE)
    mask = sample_mask(2, FRAMES, 16, 0.75, "random", torch.Generator().manual_seed(2))
    result = model(clips, mask)
    result.pixels.retain_grad()
    result.loss.backward()
    per_token = result.pixels.grad.abs().sum(dim=-1)  # (B, T'·N)
    assert bool((per_token[~mask] == 0).all())
    assert bool((per_token[mask] > 0).all())
    targets = model.targets(clips)  # per patch and channel: mean 0, std 1
    per_channel = targets.unflatten(-1, (-1, 3))
    assert per_channel.mean(dim=-2).abs().max() < 1e-4
    expected = (result.pixels - targets).pow(2).mean(dim=-1)[mask].mean()
    assert result.loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_the_encoder_is_the_zoo_model_and_its_state_comes_back_without_the_decoder() -> None:
    model = autoencoder("xvit_tiny")
    encoder = encoder_state(model.state_dict())
    assert set(encoder) == set(model.encoder.state_dict())
    assert not [name for name in encoder if "decoder" in name or name == "mask_token"]
    fresh = create_model("xvit_tiny", num_classes=3, num_frames=FRAMES, img_size=SIZE)
    fresh.load_state_dict(encoder)  # strict: every tensor of the classifier, none more
    assert torch.equal(fresh.blocks[0].attn.qkv.weight, model.encoder.blocks[0].attn.qkv.weight)
    assert not [
        name for name, p in model.named_parameters() if name.startswith("encoder.head") and p.requires_grad
    ]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["model.name=xvit_tiny", "pretrain.masking=random"], "pretrain.masking=random, .*: XViT takes tube masking"),
        (["model.name=timesformer_tiny", "pretrain.masking=random"], "TimeSformer takes tube masking"),
        (["model.name=vivit_fe_tiny"], "model.name=vivit_fe_tiny.*cannot encode visible tokens only"),
        (["pretrain.mask_ratio=0.97"], r"pretrain.mask_ratio=0.97.*leaves no visible token"),
        (["pretrain.mask_ratio=1"], r"pretrain.mask_ratio: Input should be less than 1"),
        (["pretrain.decoder_width=100"], "decoder_width 100 must be even and divisible by decoder_heads 6"),
    ],
)  # fmt: skip
def test_settings_that_cannot_pretrain_are_one_line_naming_them(overrides: list[str], says: str) -> None:
    sizes = ["data.num_frames=4", "data.crop_size=32", "model.name=joint_tiny"]
    with pytest.raises(ConfigError, match=says):
        check_pretrain_config(load_config(None, [*sizes, *overrides]))
