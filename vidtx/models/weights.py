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
    """A vidtx model file: the preset name, the keyword arguments it was built with, the weights, and
    a pretrained encoder's decoder (a masked autoencoder's other tensors; empty: none kept)."""

    model_name: str
    model_kwargs: dict[str, Any]
    state_dict: dict[str, Tensor]
    decoder: dict[str, Tensor]


def save_checkpoint(model: nn.Module, path: str | Path, decoder: Mapping[str, Tensor] | None = None) -> None:
    """Save a model made by `create_model` with what is needed to rebuild it (`load_checkpoint`), and
    the decoder it was pretrained with, if given (what a continued pretraining starts from)."""
    spec = getattr(model, "model_spec", None)
    if spec is None:
        raise ValueError("only models made by vidtx.models.create_model can be saved as checkpoints")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    content = {"model_name": spec["name"], "model_kwargs": spec["kwargs"], "state_dict": model.state_dict()}
    torch.save(content | ({"decoder": dict(decoder)} if decoder else {}), path)


def read_checkpoint(path: str | Path) -> Checkpoint:
    content = torch.load(path, map_location="cpu", weights_only=True)
    return Checkpoint(
        content["model_name"], content["model_kwargs"], content["state_dict"], content.get("decoder", {})
    )


# --- released X-ViT checkpoints (github.com/1adrianb/video-transformers) -----------------------------
#
# A SlowFast checkpoint: the state dict is under "model_state"; the ViT backbone under "base_model."
# with timm's names (its temporal embedding is "temp_embed", 8 slots), the temporal-attention head
# under "consensus." ("cls_token", "temporal_encoder.<i>.*" transformer layers without qkv bias,
# "mlp_head.{0,1,4}": LayerNorm, Linear, Linear), and a linear classifier "new_fc.*" that the
# released model builds and never calls.

OFFICIAL_UNUSED_PREFIXES = ("new_fc.",)
_OFFICIAL_HEAD = {"cls_token": "cls_token", "temporal_encoder": "blocks", "mlp_head.0": "norm"}
_OFFICIAL_HEAD |= {"mlp_head.1": "fc1", "mlp_head.4": "fc2"}


class UnexpectedTensorError(KeyError):
    """A released checkpoint holds a tensor with no place in an X-ViT."""


def _renamed(name: str, renames: Mapping[str, str]) -> str | None:
    """`name` with the first matching prefix of `renames` (a whole name or a dotted prefix) replaced."""
    for old, new in renames.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return None


def official_to_vidtx(name: str) -> str | None:
    """The vidtx name of a released checkpoint's tensor; None for the ones the released model does not
    use. Raises UnexpectedTensorError for a name of neither kind."""
    if name.startswith(OFFICIAL_UNUSED_PREFIXES):
        return None
    if name.startswith("base_model."):
        backbone = name.removeprefix("base_model.")
        return "temporal_embed" if backbone == "temp_embed" else backbone
    head = (
        _renamed(name.removeprefix("consensus."), _OFFICIAL_HEAD) if name.startswith("consensus.") else None
    )
    if head is None:
        raise UnexpectedTensorError(name)
    return f"head.{head}"


def vidtx_to_official(name: str) -> str:
    """The released checkpoint's name of a vidtx X-ViT tensor (the inverse of `official_to_vidtx`)."""
    if name.startswith("head."):
        inverse = {new: old for old, new in _OFFICIAL_HEAD.items()}
        return f"consensus.{_renamed(name.removeprefix('head.'), inverse)}"
    return "base_model." + ("temp_embed" if name == "temporal_embed" else name)


def official_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """`model`'s weights under the released checkpoint's names (without the unused `new_fc`)."""
    return {vidtx_to_official(name): tensor for name, tensor in model.state_dict().items()}


class OfficialLoadReport(NamedTuple):
    """What `load_official_checkpoint` did: every model tensor was filled from `loaded` (checkpoint
    names); `ignored` are the checkpoint's tensors the released model does not use."""

    loaded: list[str]
    ignored: list[str]


CLASSIFIER = "head.fc2."  # the last linear layer: what fine-tuning on other classes starts afresh


def read_official_checkpoint(path: str | Path) -> dict[str, Tensor]:
    """The state dict of a released checkpoint file (its "model_state"), read with `weights_only=True`."""
    content = torch.load(path, map_location="cpu", weights_only=True)
    return dict(content.get("model_state", content))


def official_num_classes(state: Mapping[str, Tensor]) -> int:
    """The classes a released checkpoint's model was trained on: its last linear layer's rows."""
    return state[vidtx_to_official(CLASSIFIER + "weight")].shape[0]


def load_official_checkpoint(
    model: nn.Module, source: str | Path | Mapping[str, Any], *, classifier: bool = True
) -> OfficialLoadReport:
    """Fill every tensor of an X-ViT built like a released model (e.g. `create_model("xvit_b16_16x224_k600")`)
    from a released checkpoint file (read with `weights_only=True`) or an already loaded dict, with or
    without its "model_state" level. A tensor of the checkpoint with no place in the model, a model
    tensor the checkpoint lacks and a shape that differs are errors that name them. With
    `classifier=False` the last linear layer keeps its initialisation (fine-tuning on other classes)."""
    state = (
        read_official_checkpoint(source)
        if isinstance(source, str | Path)
        else source.get("model_state", source)
    )
    mapped: dict[str, Tensor] = {}
    loaded, ignored, unexpected = [], [], []
    for name, tensor in state.items():
        try:
            ours = official_to_vidtx(name)
        except UnexpectedTensorError:
            unexpected.append(name)
            continue
        if ours is None or (not classifier and ours.startswith(CLASSIFIER)):
            ignored.append(name)
            continue
        mapped[ours] = tensor
        loaded.append(name)
    target = {
        name: t for name, t in model.state_dict().items() if classifier or not name.startswith(CLASSIFIER)
    }
    problems = [f"unexpected tensors {unexpected}"] if unexpected else []
    if extra := sorted(set(mapped) - set(target)):
        problems.append(f"tensors the model has no place for {[vidtx_to_official(n) for n in extra]}")
    if missing := sorted(set(target) - set(mapped)):
        problems.append(f"model tensors the checkpoint lacks {missing}")
    problems += [
        f"{vidtx_to_official(name)}: checkpoint {tuple(tensor.shape)}, model {tuple(target[name].shape)}"
        for name, tensor in mapped.items()
        if name in target and tensor.shape != target[name].shape
    ]
    if problems:
        raise ValueError("not the released X-ViT this model is built as: " + "; ".join(problems))
    model.load_state_dict(mapped, strict=classifier)
    log.info("loaded %d tensors of a released X-ViT checkpoint; ignored %s", len(loaded), ignored)
    return OfficialLoadReport(loaded, ignored)
