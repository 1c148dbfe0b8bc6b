"""Released VideoMAE weights into vidtx's `VideoMAEViT` (`vidtx.models.videomae`), so a fine-tune starts
from them: the official release's checkpoints (MCG-NJU/VideoMAE, pretrained or fine-tuned) and Hugging
Face's `VideoMAEModel` / `VideoMAEForVideoClassification` state dicts.

The official names are timm's, as vidtx's (`blocks.<i>.attn.qkv`, `q_bias`, `v_bias`, `mlp.fc1`, ...):
a pretrained checkpoint's encoder is under `encoder.` and its decoder is dropped; its classifier is
`head`, vidtx's `head.fc`. Hugging Face splits the projection into `query` / `key` / `value` (joined
here into `qkv`, its query and value biases into `q_bias` / `v_bias`) and names the rest as BERT does.
(A `.safetensors` file of Hugging Face's reads with `safetensors.torch.load_file` first.) Neither
stores the fixed position table, which the model builds for its own frames and size: the
release's checkpoints start from 16 frames at 224 px, and one converted for another frame count or
size loads unchanged, its positions made for that count (VideoMAE's fine-tuning does the same).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import Tensor

from vidtx.models.presets import create_model
from vidtx.models.videomae import VideoMAEViT

_HUGGING_FACE = [  # (pattern of a Hugging Face name, vidtx name)
    (r"embeddings\.patch_embeddings\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
    (r"encoder\.layer\.(\d+)\.output\.dense\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (r"encoder\.layer\.(\d+)\.layernorm_before\.(weight|bias)", r"blocks.\1.norm1.\2"),
    (r"encoder\.layer\.(\d+)\.layernorm_after\.(weight|bias)", r"blocks.\1.norm2.\2"),
    (r"encoder\.layer\.(\d+)\.attention\.attention\.(?:query\.bias|q_bias)", r"blocks.\1.attn.q_bias"),
    (r"encoder\.layer\.(\d+)\.attention\.attention\.(?:value\.bias|v_bias)", r"blocks.\1.attn.v_bias"),
    (r"fc_norm\.(weight|bias)", r"fc_norm.\1"),
    (r"classifier\.(weight|bias)", r"head.fc.\1"),
]
_PROJECTION = re.compile(r"encoder\.layer\.(\d+)\.attention\.attention\.(query|key|value)\.weight")


def from_hugging_face(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A Hugging Face VideoMAE state dict (`videomae.` prefix or none) in vidtx's names."""
    converted: dict[str, Tensor] = {}
    projections: dict[str, dict[str, Tensor]] = {}
    for name, tensor in state.items():
        name = name.removeprefix("videomae.")
        if match := _PROJECTION.fullmatch(name):
            projections.setdefault(match[1], {})[match[2]] = tensor
            continue
        for pattern, replacement in _HUGGING_FACE:
            if re.fullmatch(pattern, name):
                converted[re.sub(pattern, replacement, name)] = tensor
                break
        else:
            raise ValueError(f"{name}: not a tensor of Hugging Face's VideoMAE encoder or classifier")
    for block, parts in projections.items():
        converted[f"blocks.{block}.attn.qkv.weight"] = torch.cat(
            [parts["query"], parts["key"], parts["value"]]
        )
    return converted


def from_official(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """An official VideoMAE checkpoint's state (`model` / `module` of the file, or the dict itself):
    a pretrained one's encoder, decoder dropped, or a fine-tuned one, in vidtx's names."""
    state = state.get("model", state.get("module", state))
    pretrained = any(name.startswith("encoder.") for name in state)
    converted = {}
    for name, tensor in state.items():
        if pretrained:
            if not name.startswith("encoder.") or name.startswith("encoder.head"):
                continue  # the decoder, its mask token and projection; the pretraining's unused head
            name = name.removeprefix("encoder.")
        if name in ("norm.weight", "norm.bias"):
            continue  # the pretraining encoder's final norm: the fine-tuned model pools into fc_norm
        converted[re.sub(r"^head\.", "head.fc.", name)] = tensor
    return converted


def videomae_model(
    state: Mapping[str, Tensor], *, num_frames: int, img_size: int, **options: object
) -> VideoMAEViT:
    """`videomae_b16_16x224`'s architecture sized as `state`'s tensors (width, depth, patch, tubelet,
    classes), for `num_frames` frames of `img_size` pixels, with `state` (vidtx's names) loaded; a
    tensor the model lacks or does not have is an error."""
    patch = state["patch_embed.proj.weight"]  # (D, 3, tubelet, p, p)
    depth = 1 + max(int(name.split(".")[1]) for name in state if name.startswith("blocks."))
    dim = patch.shape[0]
    sizes = {"embed_dim": dim, "depth": depth, "tubelet_size": patch.shape[2], "patch_size": patch.shape[3]}
    sizes["num_heads"] = options.pop("num_heads", max(1, dim // 64))  # VideoMAE's heads are 64 wide
    sizes["mlp_ratio"] = state["blocks.0.mlp.fc1.weight"].shape[0] / dim
    if "head.fc.weight" in state:
        sizes["num_classes"] = state["head.fc.weight"].shape[0]
    model = create_model("videomae_b16_16x224", num_frames=num_frames, img_size=img_size, **sizes, **options)
    missing, unexpected = model.load_state_dict(dict(state), strict=False)
    if unexpected or [name for name in missing if not name.startswith(("head.", "fc_norm."))]:
        raise ValueError(f"not VideoMAE's ViT: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model
