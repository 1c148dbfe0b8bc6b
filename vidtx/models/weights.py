"""Weights: initialise a video model from an image ViT, and save/read vidtx model checkpoints.

Every file is read with `torch.load(weights_only=True)`: tensors and plain containers only, never
arbitrary pickled objects.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from vidtx.models.vit import ViTEncoder
from vidtx.nn import resize_pos_embed

log = logging.getLogger(__name__)

StateDict = Mapping[str, Tensor]


class LoadReport(NamedTuple):
    """What `load_image_vit` did not load: model keys left at their init, file keys the model has no
    place for, and keys present in both whose shapes could not be adapted."""

    missing_keys: list[str]
    unexpected_keys: list[str]
    mismatched_keys: list[str]


def read_state_dict(path: str | Path) -> dict[str, Tensor]:
    """A state dict from a file; unwraps the usual {"state_dict": ...} / {"model": ...} nesting."""
    content = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("state_dict", "model"):
        if isinstance(content.get(key), Mapping):
            content = content[key]
    return dict(content)


def _adapt(name: str, tensor: Tensor, target: Tensor, model: ViTEncoder) -> Tensor | None:
    """`tensor` reshaped for the model's `target` slot, or None when it cannot be."""
    if tensor.shape == target.shape:
        return tensor
    if name == "pos_embed":
        resized = resize_pos_embed(tensor, model.patch_embed.grid_size)
        return resized if resized.shape == target.shape else None
    if name == "patch_embed.proj.weight" and target.dim() == 5 and tensor.shape == target[:, :, 0].shape:
        # ViViT's "central frame" init: the image kernel in the middle frame of the tubelet, zeros elsewhere.
        tubelet = torch.zeros(target.shape, dtype=tensor.dtype)  # (D, C, tubelet, p, p)
        tubelet[:, :, target.shape[2] // 2] = tensor
        return tubelet
    return None


def load_image_vit(model: ViTEncoder, source: str | Path | StateDict) -> LoadReport:
    """Initialise a model's spatial trunk from an image-ViT state dict with timm's key names.

    Positions are resized bicubically when the patch grid differs; a 2-D patch kernel fills the centre
    frame of a 3-D tubelet kernel; temporal embeddings are set to zero (an image has no time); every
    other parameter the image model lacks keeps its init. The image classifier (`head.*`) has no
    place in the video models and is reported as unexpected. The report is also logged.
    """
    state = read_state_dict(source) if isinstance(source, str | Path) else dict(source)
    target = model.state_dict()
    loadable: dict[str, Tensor] = {}
    unexpected: list[str] = []
    mismatched: list[str] = []
    for name, tensor in state.items():
        if name not in target:
            unexpected.append(name)
        elif (adapted := _adapt(name, tensor, target[name], model)) is None:
            mismatched.append(name)
        else:
            loadable[name] = adapted
    model.load_state_dict(loadable, strict=False)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("temporal_embed"):
                param.zero_()
    report = LoadReport([name for name in target if name not in loadable], unexpected, mismatched)
    log.info(
        "loaded %d of %d tensors from the image ViT; missing %s; unexpected %s; shape mismatch %s",
        len(loadable),
        len(target),
        report.missing_keys,
        report.unexpected_keys,
        report.mismatched_keys,
    )
    return report


@dataclass(frozen=True)
class Checkpoint:
    """A vidtx model file: the preset name, the keyword arguments it was built with, the weights."""

    model_name: str
    model_kwargs: dict[str, Any]
    state_dict: dict[str, Tensor]


def save_checkpoint(model: nn.Module, path: str | Path) -> None:
    """Save a model made by `create_model` with what is needed to rebuild it (`load_checkpoint`)."""
    spec = getattr(model, "model_spec", None)
    if spec is None:
        raise ValueError("only models made by vidtx.models.create_model can be saved as checkpoints")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {"model_name": spec["name"], "model_kwargs": spec["kwargs"], "state_dict": model.state_dict()}, path
    )


def read_checkpoint(path: str | Path) -> Checkpoint:
    content = torch.load(path, map_location="cpu", weights_only=True)
    return Checkpoint(content["model_name"], content["model_kwargs"], content["state_dict"])
