"""The model zoo: X-ViT's mixing rule, equivalences with the image ViT, the registry, weights, bf16."""

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from vidtx.config import ConfigError, ModelConfig, PipelineConfig
from vidtx.model_factory import build_model, check_model_config
from vidtx.models import (
    PRESETS,
    VisionTransformer,
    create_model,
    list_models,
    load_checkpoint,
    load_image_vit,
    no_weight_init,
    save_checkpoint,
    space_time_mix,
)
from vidtx.models.heads import TemporalAverageHead
from vidtx.models.mixing import SpaceTimeMixingAttention, window_offsets
from vidtx.nn import resize_pos_embed

TINY_VIT = {"img_size": 56, "patch_size": 8, "embed_dim": 96, "depth": 4, "num_heads": 4}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).norm() / expected.norm()).item()


def reference_mix(
    x: torch.Tensor, num_frames: int, shift_div: int, layout: str, offsets: tuple[int, ...] = (1, -1)
) -> torch.Tensor:
    """Frame by frame and channel by channel: which neighbour each channel of each frame comes from."""
    rows, heads, _, head_dim = x.shape
    past, future = sorted(o for o in offsets if o < 0), sorted(o for o in offsets if o > 0)
    out = torch.zeros_like(x)
    for row in range(rows):
        clip, t = divmod(row, num_frames)
        for head in range(heads):
            for j in range(head_dim):
                if layout == "embed":  # whole embedding, head-major: a fold per offset, in their order
                    channel, fold = head * head_dim + j, heads * head_dim // shift_div
                    offset = offsets[channel // fold] if channel < fold * len(offsets) else 0
                else:  # inside every head: [past (t-w first) | current | future (t+w last)]
                    fold = head_dim // shift_div
                    from_end = head_dim - 1 - j
                    if j < fold * len(past):
                        offset = past[j // fold]
                    elif from_end < fold * len(future):
                        offset = future[len(future) - 1 - from_end // fold]
                    else:
                        offset = 0
                if 0 <= t + offset < num_frames:
                    out[row, head, :, j] = x[clip * num_frames + t + offset, head, :, j]
    return out


@pytest.mark.parametrize("layout", ["embed", "per_head"])
@pytest.mark.parametrize("num_frames", [1, 2, 8, 16])
@pytest.mark.parametrize("shift_div", [4, 8])
def test_space_time_mix_matches_per_frame_loop(layout: str, num_frames: int, shift_div: int) -> None:
    x = torch.randn(2 * num_frames, 4, 3, 8)  # (B*T, heads, S, dh)
    mixed = space_time_mix(x, num_frames, shift_div, layout)  # type: ignore[arg-type]
    assert torch.equal(mixed, reference_mix(x, num_frames, shift_div, layout))


@pytest.mark.parametrize("layout", ["embed", "per_head"])
@pytest.mark.parametrize(("window", "boundaries_only"), [(2, False), (2, True), (3, False)])
@pytest.mark.parametrize("num_frames", [1, 2, 8])  # 1 and 2: neighbours beyond the clip lend zeros
def test_wider_windows_give_every_neighbour_a_fold(
    layout: str, window: int, boundaries_only: bool, num_frames: int
) -> None:
    offsets = window_offsets(window, boundaries_only)
    assert offsets == (
        (2, -2) if boundaries_only else tuple(o for d in range(1, window + 1) for o in (d, -d))
    )
    x = torch.randn(2 * num_frames, 4, 3, 16)  # (B*T, heads, S, dh)
    mixed = space_time_mix(x, num_frames, 8, layout, offsets)  # type: ignore[arg-type]
    assert torch.equal(mixed, reference_mix(x, num_frames, 8, layout, offsets))


def test_the_attention_mixes_its_projection_in_place_as_the_reference_does() -> None:
    for target in ("kv", "k", "v"):
        attention = SpaceTimeMixingAttention(
            16, 2, num_frames=4, shift_div=4, target=target, attention_impl="math"
        ).eval()
        x = torch.randn(2 * 4, 5, 16)  # (B*T, S, D)
        q, k, v = attention.qkv(x).unflatten(-1, (3, 2, 8)).permute(2, 0, 3, 1, 4)  # (B*T, heads, S, dh)
        k = space_time_mix(k, 4, 4) if "k" in target else k
        v = space_time_mix(v, 4, 4) if "v" in target else v
        expected = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, -1) @ v  # (B*T, heads, S, dh)
        torch.testing.assert_close(attention(x), attention.proj(expected.transpose(1, 2).flatten(2)))
    mixed_input = SpaceTimeMixingAttention(16, 2, num_frames=4, shift_div=4, target="x").eval()
    x = torch.randn(2 * 4, 5, 16)
    shifted = space_time_mix(x[:, None], 4, 4)[:, 0]  # the input's channels, as one "head"
    plain = SpaceTimeMixingAttention(16, 2, num_frames=4, shift_div=0).eval()
    plain.load_state_dict(mixed_input.state_dict())
    torch.testing.assert_close(mixed_input(x), plain(shifted))


@pytest.mark.parametrize("layout", ["embed", "per_head"])
@pytest.mark.parametrize("target", ["kv", "k", "x"])
def test_in_place_mixing_has_the_gradients_of_the_reference(layout: str, target: str) -> None:
    """The attention's in-place shift (one autograd node) back-propagates exactly what the
    out-of-place reference (`space_time_mix` on separate key and value tensors) does."""
    torch.manual_seed(0)
    attention = SpaceTimeMixingAttention(
        16,
        2,
        num_frames=4,
        shift_div=4,
        layout=layout,
        target=target,
        attention_impl="math",  # type: ignore[arg-type]
    )
    reference = SpaceTimeMixingAttention(16, 2, num_frames=4, shift_div=0, attention_impl="math")
    reference.load_state_dict(attention.state_dict())
    x = torch.randn(2 * 4, 5, 16, requires_grad=True)  # (B*T, S, D)
    x_ref = x.detach().clone().requires_grad_()
    if target == "x":
        out_ref = reference(space_time_mix(x_ref[:, None], 4, 4, layout)[:, 0])  # type: ignore[arg-type]
    else:
        q, k, v = reference.qkv(x_ref).unflatten(-1, (3, 2, 8)).permute(2, 0, 3, 1, 4)  # (B*T, heads, S, dh)
        k = space_time_mix(k, 4, 4, layout) if "k" in target else k  # type: ignore[arg-type]
        v = space_time_mix(v, 4, 4, layout) if "v" in target else v  # type: ignore[arg-type]
        attended = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, -1) @ v  # (B*T, heads, S, dh)
        out_ref = reference.proj(attended.transpose(1, 2).flatten(2))
    upstream = torch.randn_like(out_ref)
    attention(x).backward(upstream)
    out_ref.backward(upstream)
    torch.testing.assert_close(x.grad, x_ref.grad)
    for (name, param), ref in zip(attention.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(param.grad, ref.grad, msg=name)


def test_space_time_mix_fraction_boundaries_and_off_switch() -> None:
    x = torch.randn(2 * 4, 2, 3, 8) + 10  # no channel is zero by chance
    mixed = space_time_mix(x, 4, 4).unflatten(0, (2, 4))  # (B, T, heads, S, dh); 16 channels, fold 4
    channels = mixed.transpose(2, 3).flatten(3)  # (B, T, S, C), c = head * dh + j
    assert (channels[:, 3, :, :4] == 0).all()  # the last frame has no t+1
    assert (channels[:, 0, :, 4:8] == 0).all()  # the first frame has no t-1
    assert (channels != 0).float().mean().item() == pytest.approx(1 - 2 * (1 / 4) * (1 / 4))
    assert space_time_mix(x, 4, 0) is x
    with pytest.raises(ValueError, match="shift_div"):
        space_time_mix(x, 4, 1)
    with pytest.raises(ValueError, match="cannot give 2 neighbours a share of 8 channels"):
        space_time_mix(x, 4, 16, "per_head")  # 8 channels per head / 16 = 0


def test_summary_tokens_add_each_frames_mean_key_and_value() -> None:
    attention = SpaceTimeMixingAttention(
        8, 2, num_frames=3, shift_div=0, summary_token=True, attention_impl="math"
    ).eval()
    x = torch.randn(2 * 3, 5, 8)  # (B*T, S, D)
    q, k, v = attention.qkv(x).unflatten(-1, (3, 2, 4)).permute(2, 0, 3, 1, 4)  # (B*T, heads, S, dh)
    expected = torch.empty(6, 2, 5, 4)
    for row in range(6):
        clip = row // 3
        frames = range(clip * 3, clip * 3 + 3)
        keys = torch.cat(
            [k[row], torch.stack([k[f].mean(1) for f in frames], dim=1)], dim=1
        )  # (heads, S+T, dh)
        values = torch.cat([v[row], torch.stack([v[f].mean(1) for f in frames], dim=1)], dim=1)
        expected[row] = torch.softmax(q[row] @ keys.transpose(1, 2) / 2.0, -1) @ values
    expected_out = attention.proj(expected.transpose(1, 2).flatten(2))
    torch.testing.assert_close(attention(x), expected_out)


def test_xvit_without_mixing_is_the_image_vit_on_every_frame() -> None:
    vit = VisionTransformer(num_classes=5, **TINY_VIT).eval()
    xvit = create_model("xvit_tiny", num_frames=4, shift_div=0).eval()
    report = load_image_vit(xvit, vit.state_dict())
    assert report.unexpected_keys == ["head.weight", "head.bias"]
    assert not report.mismatched_keys
    assert (xvit.temporal_embed == 0).all()
    clips = torch.randn(2, 3, 4, 56, 56)
    features = xvit.forward_features(clips)  # (B, T, D)
    for t in range(4):
        torch.testing.assert_close(features[:, t], vit.forward_features(clips[:, :, t]), rtol=1e-5, atol=1e-5)
    mixing = create_model("xvit_tiny", num_frames=4).eval()
    load_image_vit(mixing, vit.state_dict())
    assert relative_error(mixing.forward_features(clips), features) > 1e-3  # mixing changes the features


def test_reversing_frames_changes_xvit_but_not_spatial_averaging() -> None:
    clips = torch.randn(2, 3, 8, 56, 56)
    xvit = create_model("xvit_tiny").eval()
    assert (xvit(clips) - xvit(clips.flip(2))).abs().max() > 1e-4
    spatial = create_model("spatial_avg_tiny").eval()
    torch.testing.assert_close(spatial(clips), spatial(clips.flip(2)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", [name for name in list_models() if name.endswith("_tiny")])
def test_sdpa_and_math_attention_agree(name: str) -> None:
    fused = create_model(name, attention_impl="sdpa").eval()
    for module in fused.modules():
        if hasattr(module, "temporal_fc"):  # give TimeSformer's temporal branch a non-zero output
            torch.nn.init.normal_(module.temporal_fc.weight, std=0.02)
    math_path = create_model(name, attention_impl="math").eval()
    math_path.load_state_dict(fused.state_dict())
    clips = torch.randn(2, 3, 8, 56, 56)
    assert relative_error(math_path(clips), fused(clips)) < 1e-5


def shrunk_overrides(name: str) -> tuple[dict[str, object], int, int]:
    """A small version of a preset (1 block, 2x2 patches a frame): (overrides, frames, image size)."""
    defaults = PRESETS[name].defaults
    frames = 8 if defaults.get("official_compat") else 4  # the released layout needs 8-frame segments
    overrides: dict[str, object] = {"depth": 1, "num_frames": frames, "num_classes": 7}
    overrides["img_size"] = 2 * defaults["patch_size"]
    if name.startswith("vivit"):
        overrides["temporal_depth"] = 1
    if defaults.get("segment_frames"):
        overrides["segment_frames"] = 8
    return overrides, frames, 2 * defaults["patch_size"]


@pytest.mark.parametrize("name", list_models())
def test_every_preset_runs_forward_and_backward_in_bf16_autocast(name: str) -> None:
    overrides, frames, size = shrunk_overrides(name)
    model = create_model(name, drop_path_rate=0.1, head_dropout=0.1, **overrides)
    clips = torch.randn(2, 3, frames, size, size)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(clips)
    assert logits.shape == (2, 7)
    assert logits.dtype == torch.bfloat16
    F.cross_entropy(logits.float(), torch.tensor([1, 5])).backward()
    for param_name, param in model.named_parameters():
        assert param.grad is not None, param_name
        assert torch.isfinite(param.grad).all(), param_name


def test_wrong_clip_shape_is_rejected() -> None:
    model = create_model("xvit_tiny")
    with pytest.raises(ValueError, match=r"expected clips \(B, C, 8, 56, 56\)"):
        model(torch.randn(1, 3, 4, 56, 56))


def test_official_compat_reuses_eight_embedding_slots_and_mixes_in_chunks_of_eight() -> None:
    compat = create_model("xvit_tiny", num_frames=16, depth=2, official_compat=True).eval()
    assert compat.temporal_embed.shape == (1, 8, 1, 96)
    clips = torch.randn(1, 3, 16, 56, 56)
    changed = clips.clone()
    changed[:, :, 8:] = torch.randn(1, 3, 8, 56, 56)
    # frames 0..7 never see frames 8..15: the shift works on independent 8-frame chunks
    torch.testing.assert_close(compat.forward_features(clips)[:, :8], compat.forward_features(changed)[:, :8])
    default = create_model("xvit_tiny", num_frames=16, depth=2).eval()
    assert default.temporal_embed.shape == (1, 16, 1, 96)
    assert (
        relative_error(default.forward_features(changed)[:, 7], default.forward_features(clips)[:, 7]) > 1e-3
    )
    # the released SSv2 model: 8 embedding slots but one 16-frame mixing segment
    ssv2 = create_model("xvit_tiny", num_frames=16, depth=2, official_compat=True, segment_frames=16).eval()
    assert ssv2.temporal_embed.shape == (1, 8, 1, 96)
    assert relative_error(ssv2.forward_features(changed)[:, 7], ssv2.forward_features(clips)[:, 7]) > 1e-3

    slots = create_model("xvit_tiny", num_frames=16, shift_div=0, official_compat=True).eval()
    torch.nn.init.normal_(slots.temporal_embed)
    repeated = torch.randn(1, 3, 8, 56, 56).repeat(1, 1, 2, 1, 1)  # frame t + 8 = frame t
    features = slots.forward_features(repeated)
    torch.testing.assert_close(features[:, :8], features[:, 8:])  # the same slot embeds t and t + 8
    # the released model has no pre-logits layer: timm drops the IN-21k one for another class count
    assert not any("pre_logits" in name for name, _ in compat.named_parameters())
    with pytest.raises(ValueError, match="multiple of 8"):
        create_model("xvit_tiny", num_frames=12, official_compat=True)


def test_average_head_equals_mean_of_per_frame_logits() -> None:
    head = TemporalAverageHead(16, 5).eval()
    features = torch.randn(3, 8, 16)
    per_frame = torch.stack([head.fc(features[:, t]) for t in range(8)], dim=1)
    torch.testing.assert_close(head(features), per_frame.mean(1))


def test_xvit_options_change_the_modules() -> None:
    model = create_model("xvit_tiny", shift_div=8, mix_layout="per_head", temporal_head="average")
    attention = model.blocks[0].attn
    assert (attention.shift_div, attention.layout, attention.num_frames) == (8, "per_head", 8)
    assert isinstance(model.head, TemporalAverageHead)
    assert create_model("spatial_avg_tiny").temporal_embed is None
    for bad in ({"mix_layout": "diagonal"}, {"temporal_head": "max"}, {"shift_div": 1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            create_model("xvit_tiny", **bad)


def test_unknown_options_and_presets_are_named() -> None:
    with pytest.raises(TypeError, match=r"shift_dvi.*valid:.*shift_div"):
        create_model("xvit_tiny", shift_dvi=4)
    with pytest.raises(TypeError, match="shift_div"):
        create_model("joint_tiny", shift_div=4)  # an X-ViT option is not a joint-attention option
    with pytest.raises(ValueError, match=r"unknown model preset 'xvit_huge'.*xvit_tiny"):
        create_model("xvit_huge")
    # the schema knows no zoo; configs are checked against it where they are used
    config = PipelineConfig(model=ModelConfig(name="xvit_huge"))
    with pytest.raises(ConfigError, match=r"model.name: unknown model preset 'xvit_huge'.*xvit_b16_8x224"):
        check_model_config(config)
    config.model = ModelConfig(name="xvit_tiny", options={"shift_dvi": 4})
    with pytest.raises(ConfigError, match=r"model.options: .*shift_dvi"):
        check_model_config(config)
    config.model = ModelConfig(name="xvit_tiny", options={"shift_div": 8})
    check_model_config(config)


def test_presets_and_model_attributes() -> None:
    names = set(list_models())
    assert {"xvit_b16_8x224", "xvit_b16_16x224", "xvit_tiny"} <= names
    for family in ("spatial_avg", "joint", "timesformer", "vivit_fe"):
        assert {f"{family}_b16_8x224", f"{family}_tiny"} <= names
    with torch.device("meta"):
        xvit = create_model("xvit_b16_8x224", num_classes=174)
    assert (xvit.num_frames, xvit.img_size, xvit.num_classes) == (8, 224, 174)
    assert xvit.blocks[0].attn.shift_div == 4  # 50% of the channels, the paper's SSv2 setting
    assert type(xvit.head).__name__ == "TemporalAttentionHead"
    assert xvit.no_weight_decay() == {"cls_token", "pos_embed", "temporal_embed", "head.cls_token"}
    with torch.device("meta"):
        vivit = create_model("vivit_fe_b16_8x224")
    assert {"temporal_cls_token", "temporal_pos_embed"} <= vivit.no_weight_decay()


def timm_vit_keys(depth: int) -> set[str]:
    """The state-dict keys of timm's vit_base_patch16_224 (without layer scale or registers)."""
    keys = {"cls_token", "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias"}
    keys |= {f"{name}.{kind}" for name in ("norm", "head") for kind in ("weight", "bias")}
    for index in range(depth):
        for part in ("norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2"):
            keys |= {f"blocks.{index}.{part}.weight", f"blocks.{index}.{part}.bias"}
    return keys


def test_vit_b16_uses_timm_key_names_and_shapes() -> None:
    with torch.device("meta"):
        vit = VisionTransformer()
        xvit = create_model("xvit_b16_8x224")
    state = vit.state_dict()
    assert set(state) == timm_vit_keys(12)
    assert state["pos_embed"].shape == (1, 197, 768)
    assert state["blocks.0.attn.qkv.weight"].shape == (2304, 768)
    assert state["patch_embed.proj.weight"].shape == (768, 3, 16, 16)
    assert set(state) - {"head.weight", "head.bias"} <= set(xvit.state_dict())
    assert sum(p.numel() for p in vit.parameters()) == 86_567_656  # ViT-B/16, 1000 classes


def test_pretrained_file_loads_with_resized_positions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    vit = VisionTransformer(num_classes=5, **TINY_VIT)
    path = tmp_path / "vit.pth"
    torch.save({"model": vit.state_dict()}, path)
    cfg = ModelConfig(
        name="xvit_tiny",
        attention_impl="math",
        drop_path_rate=0.1,
        head_dropout=0.2,
        pretrained=str(path),
        options={"shift_div": 8, "mix_layout": "per_head", "temporal_head": "average"},
    )
    with caplog.at_level(logging.INFO, logger="vidtx.models.weights"):
        model = build_model(cfg, num_classes=3, num_frames=4, img_size=32)
    assert "missing" in caplog.text
    assert "temporal_embed" in caplog.text
    assert (model.num_classes, model.num_frames, model.img_size) == (3, 4, 32)
    assert model.blocks[0].attn.attention_impl == "math"
    assert model.blocks[-1].drop_path.drop_prob == pytest.approx(0.1)
    assert model.head.drop.p == pytest.approx(0.2)
    torch.testing.assert_close(model.pos_embed, resize_pos_embed(vit.pos_embed, 4))
    torch.testing.assert_close(model.blocks[3].mlp.fc2.weight, vit.blocks[3].mlp.fc2.weight)
    with pytest.raises(TypeError, match="bogus"):
        build_model(
            cfg.model_copy(update={"options": {"bogus": 1}}), num_classes=3, num_frames=4, img_size=32
        )


def test_image_kernel_initialises_the_centre_frame_of_tubelets() -> None:
    vit = VisionTransformer(**TINY_VIT)
    vivit = create_model("vivit_fe_tiny")
    report = load_image_vit(vivit, vit.state_dict())
    kernel = vivit.patch_embed.proj.weight  # (D, C, 2, p, p)
    torch.testing.assert_close(kernel[:, :, 1], vit.patch_embed.proj.weight)
    assert (kernel[:, :, 0] == 0).all()
    assert "temporal_pos_embed" in report.missing_keys
    assert "patch_embed.proj.weight" not in report.missing_keys


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    model = create_model("xvit_tiny", num_classes=3, mix_layout="per_head").eval()
    save_checkpoint(model, tmp_path / "ckpt" / "model.pt")
    loaded = load_checkpoint(tmp_path / "ckpt" / "model.pt").eval()
    assert loaded.model_spec == model.model_spec
    assert loaded.blocks[0].attn.layout == "per_head"
    clips = torch.randn(1, 3, 8, 56, 56)
    torch.testing.assert_close(loaded(clips), model(clips))
    with pytest.raises(ValueError, match="create_model"):
        save_checkpoint(VisionTransformer(**TINY_VIT), tmp_path / "vit.pt")


def test_mixed_fraction_is_two_over_shift_div() -> None:
    for shift_div in (4, 8):
        attention = create_model("xvit_tiny", shift_div=shift_div).blocks[0].attn
        x = torch.ones(8, attention.num_heads, 2, attention.head_dim)  # one clip of 8 frames
        mixed = space_time_mix(x, attention.num_frames, attention.shift_div, attention.layout)
        # at the clip ends the borrowed channels are zeros: 1/shift_div from t-1 plus 1/shift_div from t+1
        first, last = (mixed[0] == 0).float().mean().item(), (mixed[7] == 0).float().mean().item()
        assert first + last == pytest.approx(2 / shift_div)
        assert (mixed[1:7] == 1).all()


def test_tiny_presets_start_with_larger_weights_and_positions() -> None:
    """Narrow models trained from scratch need more than timm's 0.02 (see ViTEncoder)."""
    tiny, wide = create_model("xvit_tiny"), create_model("xvit_tiny", init_std=0.02, pos_embed_std=0.02)
    assert tiny.pos_embed.std().item() == pytest.approx(0.1, rel=0.15)
    assert tiny.blocks[0].mlp.fc1.weight.std().item() == pytest.approx(0.1, rel=0.1)
    assert wide.pos_embed.std().item() == pytest.approx(0.02, rel=0.15)
    assert wide.blocks[0].mlp.fc1.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_a_model_built_without_weight_init_keeps_its_weights_as_created() -> None:
    """`check_model_config`'s meta network skips the init: a first random init of a meta tensor imports
    torch._dynamo (about 1.3 s of each CLI start, for nothing). Checked in a fresh interpreter."""
    with no_weight_init():
        model = create_model("xvit_tiny")
    assert torch.count_nonzero(model.pos_embed) == 0  # created as zeros, left so
    assert torch.count_nonzero(create_model("xvit_tiny").pos_embed) > 0  # initialised again outside
    check = (
        "import sys; from vidtx.config import PipelineConfig; from vidtx.model_factory import check_model_config; "
        "check_model_config(PipelineConfig()); assert 'torch._dynamo' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_ablation_knobs_of_tables_1_and_2() -> None:
    layers = {
        option: [bool(block.attn.moves) for block in create_model("xvit_tiny", mix_layers=option).blocks]
        for option in ("all", "first_half", "second_half", "odd")
    }
    assert layers == {
        "all": [True] * 4,
        "first_half": [True, True, False, False],
        "second_half": [False, False, True, True],
        "odd": [False, True, False, True],
    }
    assert len(create_model("xvit_tiny", temporal_depth=3).head.blocks) == 3
    window = create_model("xvit_tiny", shift_div=8, mix_window=2).blocks[0].attn
    assert [offset for offset, _, _ in window.moves] == [1, -1, 2, -2]
    boundaries = create_model("xvit_tiny", shift_div=8, mix_window=2, mix_boundaries_only=True).blocks[0].attn
    assert [offset for offset, _, _ in boundaries.moves] == [2, -2]
    clips = torch.randn(2, 3, 8, 56, 56)
    for target in ("kv", "k", "v", "x"):
        assert create_model("xvit_tiny", mix_target=target)(clips).shape == (2, 10)
    with pytest.raises(ValueError, match="mix_layers"):
        create_model("xvit_tiny", mix_layers="even")
    with pytest.raises(ValueError, match="mix_target"):
        create_model("xvit_tiny", mix_target="q")
