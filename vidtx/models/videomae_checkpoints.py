"""VideoMAE's checkpoints as people download them, recognised and read into vidtx's models.

What is read: a Hugging Face `save_pretrained` folder (its `config.json`, and `model.safetensors` or
`pytorch_model.bin`, whole or sharded), a lone Hugging Face `.safetensors` / `.bin`, or the official
release's `.pth` (a pretraining, with its decoder, or a fine-tuned model). Any of Hugging Face's
`VideoMAEModel`, `VideoMAEForPreTraining` and `VideoMAEForVideoClassification`, with either pooling.

The sizes (width, depth, heads, patch, tubelet, frames, crop, LayerNorm eps, pooling) come from
`config.json` where there is one, else from the tensors' shapes (heads by VideoMAE's widths, the
frames and crop of its release: 16 at 224). A pretraining's encoder keeps its final norm (what its
decoder reads); its decoder fills vidtx's masked autoencoder, so that the pretraining can go on.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from vidtx.models.mae import ENCODER_PREFIX, MaskedAutoencoder
from vidtx.models.presets import create_model, option_defaults
from vidtx.models.videomae import VideoMAEViT
from vidtx.models.videomae_weights import Renamed, Weights, from_hugging_face, from_official, is_hugging_face

PRESET = "videomae_b16_16x224"  # the architecture, sized as the checkpoint is
SUFFIXES = (".safetensors", ".bin", ".pth")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # a `save_pretrained` folder's, each maybe sharded
# VideoMAE's ViTs S, B, L, H, g: heads by width, encoders' and decoders', where no config.json says
HEADS = {192: 3, 384: 6, 512: 8, 640: 8, 768: 12, 1024: 16, 1280: 16, 1408: 16}
RELEASED_CLIPS = {"num_frames": 16, "img_size": 224}  # what the release pretrained and fine-tuned on


def is_videomae_source(path: str | Path) -> bool:
    """Whether `path` names a checkpoint this module reads (by its name: a folder with a
    `config.json`, or a file ending in one of `SUFFIXES`)."""
    path = Path(path)
    return path.suffix in SUFFIXES or (path / "config.json").is_file()


@dataclass(frozen=True)
class VideoMAECheckpoint:
    """A VideoMAE checkpoint in vidtx's names, with the sizes of the models it fills."""

    source: str
    layout: str  # e.g. "Hugging Face's VideoMAEForPreTraining"
    weights: Renamed
    options: dict[str, Any]  # `create_model(PRESET, **options)`
    decoder_options: dict[str, Any]  # MaskedAutoencoder's ({}: no decoder)
    sizes_from: str  # "config.json" or "the tensors' shapes"
    class_names: list[str] | None = None  # a classifier's, where config.json names them

    def summary(self) -> str:
        """One line: what was found."""
        o, d = self.options, self.decoder_options
        text = f"{self.source}: {self.layout}, a ViT {o['embed_dim']} wide, {o['depth']} blocks, "
        text += f"{o['num_heads']} heads, {o['num_frames']}x{o['img_size']}, "
        text += "a final norm" if o["final_norm"] else "mean pooling into fc_norm"
        if "head.fc.weight" in self.weights.encoder:
            text += f", {o['num_classes']} classes"
        if d:
            text += f"; a decoder {d['decoder_depth']} blocks {d['decoder_dim']} wide"
        count = len(self.weights.encoder) + len(self.weights.decoder)
        return f"{text} ({count} tensors; sizes from {self.sizes_from})"

    def model_options(self) -> dict[str, Any]:
        """The `model.options` a vidtx model of `PRESET` needs to take these weights: the sizes unlike
        the preset's, and a classifier's final norm and pooling (a fine-tune of a pretraining's
        encoder follows VideoMAE's recipe instead: mean pooling into a new fc_norm)."""
        defaults = option_defaults(PRESET)
        kept = set(self.options) - {"num_frames", "img_size", "num_classes"}
        if "head.fc.weight" not in self.weights.encoder:
            kept -= {"final_norm", "pooling"}
        return {name: self.options[name] for name in sorted(kept) if defaults.get(name) != self.options[name]}

    def encoder(self) -> VideoMAEViT:
        """vidtx's `VideoMAEViT` of these sizes, with the checkpoint's weights (a model without a
        classifier gets a 1-class head, as a pretraining's encoder)."""
        model = create_model(PRESET, **self.options)
        fresh = () if "head.fc.weight" in self.weights.encoder else model.FINE_TUNING_FRESH
        _load(model, self.weights.encoder, fresh, self.source)
        return model  # type: ignore[return-value]

    def masked_autoencoder(self, **options: Any) -> MaskedAutoencoder:
        """vidtx's masked autoencoder of these sizes (`options`: its mask, targets, normalisation),
        encoder and decoder from the checkpoint; ValueError for a checkpoint without a decoder."""
        if not self.decoder_options:
            raise ValueError(f"{self.source}: {self.layout} has no decoder (not a pretraining checkpoint)")
        model = MaskedAutoencoder(self.encoder(), **(self.decoder_options | options))
        _load(model, self.weights.decoder, (ENCODER_PREFIX,), self.source)
        return model


def read_videomae(path: str | Path) -> VideoMAECheckpoint:
    """The VideoMAE checkpoint at `path` (see the module docstring); ValueError in one line when it is
    none, or a tensor does not fit (named)."""
    path = Path(path)
    state, config = _read(path)
    hugging_face = is_hugging_face(state)
    weights = from_hugging_face(state) if hugging_face else from_official(state)
    layout = _layout(weights, hugging_face, config)
    options = _options(weights.encoder, config, hugging_face)
    class_names = None
    if config and "head.fc.weight" in weights.encoder and "id2label" in config:
        class_names = [config["id2label"][str(index)] for index in range(options["num_classes"])]
    return VideoMAECheckpoint(
        str(path),
        layout,
        weights,
        options,
        _decoder_options(weights.decoder, config, path),
        "config.json" if config else "the tensors' shapes",
        class_names,
    )


def _read(path: Path) -> tuple[dict[str, Tensor], dict[str, Any] | None]:
    """The tensors at `path` and its folder's `config.json` (None for a lone file)."""
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    if not path.is_dir():
        return _read_file(path), None
    config = json.loads((path / "config.json").read_text())
    if config.get("model_type") != "videomae":
        raise ValueError(f"{path}/config.json: model_type {config.get('model_type')!r}, not 'videomae'")
    for name in WEIGHT_FILES:
        if (index := path / f"{name}.index.json").is_file():  # sharded: the files its weight map names
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            return {k: v for file in files for k, v in _read_file(path / file).items()}, config
        if (path / name).is_file():
            return _read_file(path / name), config
    raise ValueError(f"{path}: a config.json but none of {', '.join(WEIGHT_FILES)}")


def _read_file(path: Path) -> dict[str, Tensor]:
    """A file's state dict: safetensors, or a torch file read with `weights_only=True` (an official
    checkpoint's `args`, an `argparse.Namespace`, allowed), its `model` / `module` level unwrapped."""
    if path.suffix == ".safetensors":
        return load_file(path)
    with torch.serialization.safe_globals([argparse.Namespace]):
        content = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("model", "module", "state_dict"):
        if isinstance(content.get(key), Mapping):
            return dict(content[key])
    return dict(content)


def _layout(weights: Renamed, hugging_face: bool, config: dict[str, Any] | None) -> str:
    classifier = "head.fc.weight" in weights.encoder
    if hugging_face:
        kind = "VideoMAEForPreTraining" if weights.decoder else "VideoMAEModel"
        kind = "VideoMAEForVideoClassification" if classifier else kind
        return f"Hugging Face's {kind}"
    return f"the official VideoMAE {'pretraining' if weights.decoder else 'fine-tuned model'} (.pth)"


def _options(encoder: Weights, config: dict[str, Any] | None, hugging_face: bool) -> dict[str, Any]:
    """`create_model`'s options for the encoder, from `config.json` or the tensors' shapes."""
    if "patch_embed.proj.weight" not in encoder:
        raise ValueError("no patch embedding: not a VideoMAE encoder")
    dim, channels, tubelet, patch, _ = encoder["patch_embed.proj.weight"].shape  # (D, C, t, p, p)
    final_norm = "norm.weight" in encoder
    classifier = "head.fc.weight" in encoder
    options = {
        "embed_dim": dim,
        "in_chans": channels,
        "tubelet_size": tubelet,
        "patch_size": patch,
        "depth": 1 + max(int(name.split(".")[1]) for name in encoder if name.startswith("blocks.")),
        "mlp_ratio": encoder["blocks.0.mlp.fc1.weight"].shape[0] / dim,
        "final_norm": final_norm,
        "pooling": "first" if final_norm and classifier else "mean",  # without mean pooling: the first token
        "num_classes": len(encoder["head.fc.weight"]) if classifier else 1,
    }
    if config is None:  # the release's clips; the eps of the code that wrote it
        heads = HEADS.get(dim, dim // 64)
        return options | RELEASED_CLIPS | {"num_heads": heads, "norm_eps": 1e-12 if hugging_face else 1e-6}
    return options | {
        "embed_dim": config["hidden_size"],
        "in_chans": config.get("num_channels", 3),
        "tubelet_size": config["tubelet_size"],
        "patch_size": config["patch_size"],
        "depth": config["num_hidden_layers"],
        "mlp_ratio": config["intermediate_size"] / config["hidden_size"],
        "num_heads": config["num_attention_heads"],
        "norm_eps": config.get("layer_norm_eps", 1e-12),
        "num_frames": config["num_frames"],
        "img_size": config["image_size"],
    }


def _decoder_options(decoder: Weights, config: dict[str, Any] | None, path: Path) -> dict[str, Any]:
    """MaskedAutoencoder's sizes for the decoder ({} without one)."""
    if not decoder:
        return {}
    if config:
        dim, depth = config["decoder_hidden_size"], config["decoder_num_hidden_layers"]
        hidden, heads = config["decoder_intermediate_size"], config["decoder_num_attention_heads"]
    else:
        dim = decoder["decoder_embed.weight"].shape[0]
        depth = 1 + max(int(name.split(".")[1]) for name in decoder if name.startswith("decoder_blocks."))
        hidden, heads = decoder["decoder_blocks.0.mlp.fc1.weight"].shape[0], HEADS.get(dim, dim // 64)
    if hidden != 4 * dim:
        raise ValueError(f"{path}: its decoder's MLP is {hidden} wide, vidtx's decoder blocks 4x their {dim}")
    options = {"decoder_dim": dim, "decoder_depth": depth, "decoder_heads": heads}
    return options | ({"norm_pix_loss": config.get("norm_pix_loss", True)} if config else {})


def _load(model: nn.Module, weights: Weights, fresh: tuple[str, ...], source: str) -> None:
    """`weights` into `model` (tensors whose names start with one of `fresh` may be absent); the first
    tensor that does not fit is a ValueError naming it."""
    target = model.state_dict()
    if extra := [name for name in weights if name not in target]:
        raise ValueError(f"{source}: {extra[0]} has no place in a VideoMAE of the sizes it gives")
    if missing := [name for name in target if name not in weights and not name.startswith(fresh)]:
        raise ValueError(f"{source}: no {missing[0]} (a partial checkpoint?)")
    for name, tensor in weights.items():
        if tensor.shape != target[name].shape:
            raise ValueError(
                f"{source}: its {name} is {tuple(tensor.shape)}, a VideoMAE of the sizes it gives has "
                f"{tuple(target[name].shape)}"
            )
    model.load_state_dict(weights, strict=False)
