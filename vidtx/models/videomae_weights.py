"""Released VideoMAE weights in vidtx's names: the encoder (`vidtx.models.videomae.VideoMAEViT`) and the
decoder of a pretraining (`vidtx.models.mae.MaskedAutoencoder`), from the official release's
checkpoints (MCG-NJU/VideoMAE) and Hugging Face's `VideoMAEModel`, `VideoMAEForPreTraining` and
`VideoMAEForVideoClassification`.

The official names are timm's, as vidtx's encoder's (`blocks.<i>.attn.qkv`, `q_bias`, `v_bias`,
`mlp.fc1`, ...): a pretraining's encoder is under `encoder.` (its final `norm` kept), its decoder under
`decoder.` with `encoder_to_decoder` and `mask_token` beside; a fine-tuned model's classifier is
`head`, vidtx's `head.fc`. Hugging Face splits each projection into `query` / `key` / `value` (joined
here into `qkv`, the query and value biases into `q_bias` / `v_bias`) and names the rest as BERT does.
vidtx's decoder blocks are plain transformer blocks: their fused `qkv` bias is the query bias, a zero
key bias, the value bias (the same attention: a key bias shifts every score of a query alike), and
`decoder_embed` gets the zero bias that `encoder_to_decoder` lacks. Neither layout stores the fixed
position tables, which vidtx's models build for their own frames and size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

Weights = dict[str, Tensor]


class UnknownTensorError(ValueError):
    """A checkpoint holds a tensor with no place in VideoMAE's encoder, decoder or classifier."""


@dataclass(frozen=True)
class Renamed:
    """A checkpoint's tensors in vidtx's names."""

    encoder: Weights  # VideoMAEViT's
    decoder: Weights  # MaskedAutoencoder's other than its encoder's ({}: the checkpoint has none)


# Within one transformer layer, other than its attention's projection: (name, vidtx name)
_HF_LAYER = [
    (r"attention\.output\.dense\.(weight|bias)", r"attn.proj.\1"),
    (r"intermediate\.dense\.(weight|bias)", r"mlp.fc1.\1"),
    (r"output\.dense\.(weight|bias)", r"mlp.fc2.\1"),
    (r"layernorm_before\.(weight|bias)", r"norm1.\1"),
    (r"layernorm_after\.(weight|bias)", r"norm2.\1"),
]
_OFFICIAL_LAYER = [(r"((?:norm1|norm2|attn\.proj|mlp\.fc1|mlp\.fc2)\.(?:weight|bias))", r"\1")]
# The projection's pieces, named as `_attention` takes them: query/key/value.weight (Hugging Face) or
# qkv.weight (official), q_bias/v_bias (either; Hugging Face 5.x: query.bias/value.bias)
_HF_PROJECTION = {r"attention\.attention\.(query|key|value)\.weight": r"\1.weight",
                  r"attention\.attention\.(?:query\.bias|q_bias)": "q_bias",
                  r"attention\.attention\.(?:value\.bias|v_bias)": "v_bias"}  # fmt: skip
_OFFICIAL_PROJECTION = {r"attn\.qkv\.weight": "qkv.weight", r"attn\.(q_bias|v_bias)": r"\1"}

# Outside the layers: (pattern, which part, vidtx name); the decoder's are named alike in both
_DECODER = [
    (r"encoder_to_decoder\.weight", "decoder", "decoder_embed.weight"),
    (r"mask_token", "decoder", "mask_token"),
    (r"decoder\.norm\.(weight|bias)", "decoder", r"decoder_norm.\1"),
    (r"decoder\.head\.(weight|bias)", "decoder", r"decoder_pred.\1"),
]
_HUGGING_FACE = [
    (
        r"(?:videomae\.)?embeddings\.patch_embeddings\.projection\.(weight|bias)",
        "encoder",
        r"patch_embed.proj.\1",
    ),
    (r"(?:videomae\.)?layernorm\.(weight|bias)", "encoder", r"norm.\1"),
    (r"fc_norm\.(weight|bias)", "encoder", r"fc_norm.\1"),
    (r"classifier\.(weight|bias)", "encoder", r"head.fc.\1"),
    *_DECODER,
]
_HF_LAYERS = [  # (prefix of a layer's names, which part, vidtx prefix of its blocks)
    (re.compile(r"(?:videomae\.)?encoder\.layer\.(\d+)\."), "encoder", "blocks"),
    (re.compile(r"decoder\.decoder_layers\.(\d+)\."), "decoder", "decoder_blocks"),
]
_OFFICIAL = [
    (r"(?:encoder\.)?(patch_embed\.proj|norm|fc_norm)\.(weight|bias)", "encoder", r"\1.\2"),
    (r"head\.(weight|bias)", "encoder", r"head.fc.\1"),
    *_DECODER,
]
_OFFICIAL_LAYERS = [
    (re.compile(r"(?:encoder\.)?blocks\.(\d+)\."), "encoder", "blocks"),
    (re.compile(r"decoder\.blocks\.(\d+)\."), "decoder", "decoder_blocks"),
]


def is_hugging_face(state: Mapping[str, Tensor]) -> bool:
    """Whether a state dict has Hugging Face's VideoMAE names (else the official release's)."""
    return any("patch_embeddings.projection" in name for name in state)


@dataclass(frozen=True)
class _Layout:
    what: str
    names: list[tuple[str, str, str]]  # outside the layers: (pattern, part, vidtx name)
    layers: list[tuple[re.Pattern[str], str, str]]  # (a layer's prefix, part, vidtx blocks' prefix)
    layer: list[tuple[str, str]]  # within a layer, but the projection: (pattern, vidtx name)
    projection: dict[str, str]  # the projection's pieces: pattern -> the name `_attention` takes

    def rename(self, state: Mapping[str, Tensor]) -> Renamed:
        parts: dict[str, Weights] = {"encoder": {}, "decoder": {}}
        projections: dict[tuple[str, str], dict[str, Tensor]] = {}  # (part, block) -> its pieces
        for name, tensor in state.items():
            part, block, ours, piece = self._place(name)
            if piece:
                projections.setdefault((part, block), {})[piece] = tensor
            else:
                parts[part][ours] = tensor
        for (part, block), pieces in projections.items():
            parts[part] |= _attention(block, pieces, fused_bias=part == "decoder")
        decoder = parts["decoder"]
        if "decoder_embed.weight" in decoder:  # a Linear without bias: vidtx's has a zero one
            decoder["decoder_embed.bias"] = torch.zeros(len(decoder["decoder_embed.weight"]))
        return Renamed(parts["encoder"], decoder)

    def _place(self, name: str) -> tuple[str, str, str, str]:
        """Where a tensor goes: (part, its block or "", its vidtx name or "", the projection's piece it
        is or "")."""
        for pattern, part, ours in self.names:
            if re.fullmatch(pattern, name):
                return part, "", re.sub(pattern, ours, name), ""
        for prefix, part, blocks in self.layers:
            if layer := prefix.match(name):
                block, inner = f"{blocks}.{layer[1]}", name[layer.end() :]
                for pattern, piece in self.projection.items():
                    if re.fullmatch(pattern, inner):
                        return part, block, "", re.sub(pattern, piece, inner)
                for pattern, ours in self.layer:
                    if re.fullmatch(pattern, inner):
                        return part, block, f"{block}.{re.sub(pattern, ours, inner)}", ""
        raise UnknownTensorError(f"{name}: not a tensor of {self.what}'s encoder, decoder or classifier")


_HUGGING_FACE_LAYOUT = _Layout(
    "Hugging Face's VideoMAE", _HUGGING_FACE, _HF_LAYERS, _HF_LAYER, _HF_PROJECTION
)
_OFFICIAL_LAYOUT = _Layout(
    "the official VideoMAE", _OFFICIAL, _OFFICIAL_LAYERS, _OFFICIAL_LAYER, _OFFICIAL_PROJECTION
)


def from_hugging_face(state: Mapping[str, Tensor]) -> Renamed:
    """A Hugging Face VideoMAE state dict (any of its models, `videomae.` prefix or none)."""
    return _HUGGING_FACE_LAYOUT.rename(state)


def from_official(state: Mapping[str, Tensor]) -> Renamed:
    """An official VideoMAE checkpoint's state (`model` / `module` of the file, or the dict itself):
    a pretraining's encoder (its final norm kept) and decoder, or a fine-tuned model."""
    return _OFFICIAL_LAYOUT.rename(state.get("model", state.get("module", state)))


def _attention(block: str, pieces: dict[str, Tensor], *, fused_bias: bool) -> Weights:
    """One block's attention projection in vidtx's names: `qkv.weight` (3·D, D), and the query and
    value biases as `q_bias` / `v_bias` (the encoder's attention) or in a fused `qkv.bias` with a zero
    key bias (a plain block's); a bias the checkpoint lacks (trained without) is zero."""
    weight = pieces.get("qkv.weight")
    if weight is None:
        weight = torch.cat([pieces[f"{which}.weight"] for which in ("query", "key", "value")])
    dim = weight.shape[1]
    query, value = (pieces.get(name, torch.zeros(dim)) for name in ("q_bias", "v_bias"))
    if fused_bias:
        return {
            f"{block}.attn.qkv.weight": weight,
            f"{block}.attn.qkv.bias": torch.cat([query, torch.zeros(dim), value]),
        }
    return {f"{block}.attn.qkv.weight": weight, f"{block}.attn.q_bias": query, f"{block}.attn.v_bias": value}
