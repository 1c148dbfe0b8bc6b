"""Named model presets: `create_model`, `list_models`, `model_info`, `load_checkpoint`.

Every preset maps clips (B, C, T, H, W) to logits (B, num_classes). Keyword overrides replace the
preset's defaults (num_classes, num_frames, img_size, patch_size, depth, model options, ...); an
unknown keyword is a TypeError that names it and lists the valid ones.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vidtx.models.flops import count_flops
from vidtx.models.spacetime import JointSpaceTime, TimeSformer
from vidtx.models.video import VideoTransformer
from vidtx.models.videomae import VideoMAEViT
from vidtx.models.vit import ViTEncoder
from vidtx.models.vivit import ViViTFactorisedEncoder
from vidtx.models.weights import Checkpoint, read_checkpoint
from vidtx.models.xvit import XViT


@dataclass(frozen=True)
class Preset:
    model_cls: type[VideoTransformer]
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)


_B16 = {"img_size": 224, "patch_size": 16, "embed_dim": 768, "depth": 12, "num_heads": 12, "num_classes": 400}
_B32 = {**_B16, "patch_size": 32}
_L16 = {**_B16, "embed_dim": 1024, "depth": 24, "num_heads": 16}
_L32 = {**_L16, "patch_size": 32}
# Small enough to train in minutes on 2 CPU cores at 56x56 and 8 frames.
# Tiny models train from scratch on CPU: larger initial weights and positions (see ViTEncoder).
_TINY = {
    "img_size": 56,
    "patch_size": 8,
    "embed_dim": 96,
    "depth": 4,
    "num_heads": 4,
    "num_classes": 10,
    "init_std": 0.1,
    "pos_embed_std": 0.1,
}
# Half the key/value channels mixed (the paper's SSv2 setting), one temporal-attention layer, and
# the released code's channel layout ("embed"; the paper's Eq. 9 is "per_head").
_XVIT = {"shift_div": 4, "mix_layout": "embed", "temporal_head": "attention"}
_SPATIAL_ONLY = {"shift_div": 0, "temporal_head": "average", "temporal_embedding": False}
# The released checkpoints (github.com/1adrianb/video-transformers, `load_official_checkpoint`): the
# released code's layout, 8 temporal-embedding slots, dropout 0.5 on the frame features and in the head.
_RELEASED = {**_B16, "num_frames": 16, "official_compat": True, "frame_dropout": 0.5, "head_dropout": 0.5}
_VIVIT_TINY = {"tubelet_size": 2, "temporal_depth": 1}

PRESETS: dict[str, Preset] = {
    "xvit_b16_8x224": Preset(
        XViT,
        "X-ViT B/16, 50% of k/v channels mixed, temporal-attention head",
        {**_B16, "num_frames": 8, **_XVIT},
    ),
    "xvit_b16_16x224": Preset(
        XViT,
        "X-ViT B/16, 50% of k/v channels mixed, temporal-attention head",
        {**_B16, "num_frames": 16, **_XVIT},
    ),
    "xvit_b16_32x224": Preset(
        XViT, "X-ViT B/16, 32 frames (paper, Table 6)", {**_B16, "num_frames": 32, **_XVIT}
    ),
    "xvit_b32_8x224": Preset(XViT, "X-ViT B/32 (paper, Table 4)", {**_B32, "num_frames": 8, **_XVIT}),
    "xvit_l16_8x224": Preset(XViT, "X-ViT L/16", {**_L16, "num_frames": 8, **_XVIT}),
    "xvit_l32_8x224": Preset(XViT, "X-ViT L/32 (paper, Table 4)", {**_L32, "num_frames": 8, **_XVIT}),
    "xvit_b16_16x224_k600": Preset(
        XViT,
        "the released Kinetics-600 X-ViT: 25% mixed in 8-frame segments, 600 classes",
        {**_RELEASED, "num_classes": 600, "shift_div": 8, "segment_frames": 8},
    ),
    "xvit_b16_16x224_ssv2": Preset(
        XViT,
        "the released SSv2 X-ViT: 50% mixed over all 16 frames, 174 classes",
        {**_RELEASED, "num_classes": 174, "shift_div": 4, "segment_frames": 16},
    ),
    "xvit_tiny": Preset(XViT, "X-ViT, tiny (CPU tests and the demo)", {**_TINY, "num_frames": 8, **_XVIT}),
    "spatial_avg_b16_8x224": Preset(
        XViT, "spatial-only attention + temporal averaging", {**_B16, "num_frames": 8, **_SPATIAL_ONLY}
    ),
    "spatial_avg_tiny": Preset(
        XViT, "spatial-only attention + temporal averaging, tiny", {**_TINY, "num_frames": 8, **_SPATIAL_ONLY}
    ),
    "joint_b16_8x224": Preset(JointSpaceTime, "joint space-time attention", {**_B16, "num_frames": 8}),
    "joint_tiny": Preset(JointSpaceTime, "joint space-time attention, tiny", {**_TINY, "num_frames": 8}),
    "timesformer_b16_8x224": Preset(
        TimeSformer, "TimeSformer, divided space-time attention", {**_B16, "num_frames": 8}
    ),
    "timesformer_tiny": Preset(TimeSformer, "TimeSformer, tiny", {**_TINY, "num_frames": 8}),
    "vivit_fe_b16_8x224": Preset(
        ViViTFactorisedEncoder,
        "ViViT factorised encoder, 2x16x16 tubelets, 4 temporal layers",
        {**_B16, "num_frames": 8},
    ),
    "vivit_fe_tiny": Preset(
        ViViTFactorisedEncoder, "ViViT factorised encoder, tiny", {**_TINY, "num_frames": 8, **_VIVIT_TINY}
    ),
    # VideoMAE's released ViT-B (2x16x16 tubelets, 16 frames, mean pooling; init_std as its fine-tune's)
    "videomae_b16_16x224": Preset(
        VideoMAEViT,
        "VideoMAE's ViT-B/16: tubelets, fixed positions, q/v biases, mean pooling",
        {**_B16, "num_frames": 16},
    ),
    "videomae_tiny": Preset(VideoMAEViT, "VideoMAE's ViT, tiny", {**_TINY, "num_frames": 8}),
}

# Constructor arguments that wire models together internally; not user options.
_INTERNAL_ARGUMENTS = frozenset({"block_cls"})


def list_models() -> list[str]:
    return sorted(PRESETS)


def _preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; valid: {', '.join(list_models())}")
    return PRESETS[name]


def model_options(model_cls: type[VideoTransformer]) -> set[str]:
    """Keyword arguments a model class accepts, its own and those it passes to its bases."""
    options: set[str] = set()
    for cls in model_cls.__mro__:
        if issubclass(cls, ViTEncoder) and "__init__" in vars(cls):
            parameters = inspect.signature(cls.__init__).parameters.values()
            options |= {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return options - _INTERNAL_ARGUMENTS


def option_defaults(name: str) -> dict[str, Any]:
    """The value of every option of preset `name` when none is given: the preset's, else its classes'."""
    defaults: dict[str, Any] = {}
    for cls in reversed(_preset(name).model_cls.__mro__):
        if issubclass(cls, ViTEncoder) and "__init__" in vars(cls):
            parameters = inspect.signature(cls.__init__).parameters.values()
            defaults |= {p.name: p.default for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return defaults | _preset(name).defaults


def create_model(name: str, **overrides: Any) -> VideoTransformer:
    """Build preset `name` with `overrides` replacing its defaults."""
    preset = _preset(name)
    valid = model_options(preset.model_cls)
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise TypeError(f"{name}: unknown option(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    kwargs = {**preset.defaults, **overrides}
    model = preset.model_cls(**kwargs)
    model.model_spec = {"name": name, "kwargs": kwargs}
    return model


def load_checkpoint(source: str | Path | Checkpoint) -> VideoTransformer:
    """Rebuild a model saved by `save_checkpoint` (its file, or the file read) and load its weights
    (strict)."""
    checkpoint = source if isinstance(source, Checkpoint) else read_checkpoint(source)
    model = create_model(checkpoint.model_name, **checkpoint.model_kwargs)
    model.load_state_dict(checkpoint.state_dict)
    return model


def model_info(name: str, **overrides: Any) -> dict[str, Any]:
    """Parameters and GFLOPs per view (MACs, fvcore convention) of a preset, built on the meta device."""
    preset = _preset(name)
    with torch.device("meta"):
        model = create_model(name, **overrides)
    in_chans = model.patch_embed.proj.in_channels
    flops = count_flops(model, (1, in_chans, model.num_frames, model.img_size, model.img_size))
    return {
        "name": name,
        "model": type(model).__name__,
        "description": preset.description,
        "params": sum(param.numel() for param in model.parameters()),
        "gflops": flops.gflops,
        "attention_gflops": flops.attention / 1e9,
        "num_frames": model.num_frames,
        "img_size": model.img_size,
        "defaults": {**preset.defaults, **overrides},
    }
