"""X-ViT: space-time mixing attention (Bulat et al., "Space-time Mixing Attention for Video
Transformer", NeurIPS 2021).

Each frame runs the spatial attention of an image ViT (one class token per frame, cost O(T·S²) like
a ViT applied to every frame), but its keys and values borrow a fraction of their channels from the
neighbouring frames t-1 and t+1. Queries are never mixed. A temporal head (one transformer layer over
a learned token and the T per-frame class tokens, or plain averaging) makes the clip prediction.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vidtx.models.heads import TemporalAttentionHead, TemporalAverageHead
from vidtx.models.video import VideoTransformer
from vidtx.nn import MultiHeadAttention, TransformerBlock

MixLayout = Literal["embed", "per_head"]
TemporalHead = Literal["attention", "average"]
MIX_LAYOUTS: tuple[str, ...] = ("embed", "per_head")
TEMPORAL_HEADS: tuple[str, ...] = ("attention", "average")
OFFICIAL_SEGMENTS = 8  # the released code's temporal embedding slots and shift chunk length


def mixing_masks(
    num_heads: int, head_dim: int, shift_div: int, layout: MixLayout, device: torch.device | None = None
) -> tuple[Tensor, Tensor]:
    """Which channels a frame takes from its neighbours: boolean (heads, 1, head_dim) masks
    (from_next, from_prev); every other channel comes from the frame itself.

    "embed" (official code): over the whole embedding, channel c = head * head_dim + j; channels
    [0, C/n) come from t+1, [C/n, 2C/n) from t-1. "per_head" (paper Eq. 9): inside every head, in the
    order past | current | future, the first head_dim/n channels from t-1, the last head_dim/n from t+1.
    """
    if shift_div < 2:
        raise ValueError(f"shift_div must be 0 (no mixing) or >= 2, got {shift_div}")
    if layout == "embed":
        fold = num_heads * head_dim // shift_div
        channel = torch.arange(num_heads * head_dim, device=device).view(num_heads, 1, head_dim)
        from_next, from_prev = channel < fold, (channel >= fold) & (channel < 2 * fold)
    elif layout == "per_head":
        fold = head_dim // shift_div
        channel = torch.arange(head_dim, device=device).expand(num_heads, 1, head_dim)
        from_next, from_prev = channel >= head_dim - fold, channel < fold
    else:
        raise ValueError(f"mix_layout must be one of {MIX_LAYOUTS}, got {layout!r}")
    if fold == 0:
        raise ValueError(
            f"shift_div {shift_div} mixes no channel at {num_heads} heads x {head_dim} ({layout})"
        )
    return from_next, from_prev


def space_time_mix(x: Tensor, num_frames: int, shift_div: int, layout: MixLayout = "embed") -> Tensor:
    """Mix keys or values (B*T, heads, S, head_dim) across neighbouring frames; same shape out.

    Frames are batch-major, time-minor (row b*T + t is frame t of clip b). A fraction 2/shift_div of
    the channels of frame t is replaced by the same channels of frame t+1 and t-1 (see
    `mixing_masks` for which channels); frames outside the clip contribute zeros. `shift_div=0` turns
    mixing off (x is returned as is).
    """
    if shift_div == 0:
        return x
    batch_frames, num_heads, _, head_dim = x.shape
    if batch_frames % num_frames:
        raise ValueError(f"{batch_frames} rows are not a whole number of {num_frames}-frame clips")
    from_next, from_prev = mixing_masks(num_heads, head_dim, shift_div, layout, x.device)  # (heads, 1, dh)
    frames = x.unflatten(0, (-1, num_frames))  # (B, T, heads, S, dh)
    padded = F.pad(frames, (0, 0, 0, 0, 0, 0, 1, 1))  # (B, T + 2, heads, S, dh), zero frames at both ends
    next_frames, prev_frames = padded[:, 2:], padded[:, :-2]  # frame t+1 / t-1 at index t
    mixed = torch.where(from_next, next_frames, torch.where(from_prev, prev_frames, frames))
    return mixed.flatten(0, 1)


def frame_summaries(x: Tensor, num_frames: int) -> Tensor:
    """Summary tokens (paper, section 3): the spatial mean of every frame of the clip, given to each of
    its frames as extra keys or values: (B*T, heads, S, dh) -> (B*T, heads, T, dh)."""
    frames = x.unflatten(0, (-1, num_frames))  # (B, T, heads, S, dh)
    summaries = frames.mean(dim=3).transpose(1, 2)  # (B, heads, T, dh)
    return summaries[:, None].expand(-1, num_frames, -1, -1, -1).flatten(0, 1)  # (B*T, heads, T, dh)


class SpaceTimeMixingAttention(MultiHeadAttention):
    """Per-frame spatial attention whose keys and values are mixed across neighbouring frames.

    Args:
        dim: Token width D.
        num_heads: Attention heads; must divide `dim`.
        num_frames: Frames per clip (or per independently mixed segment) in the (B*T, S, D) input rows.
        shift_div: 0 = no mixing; n >= 2 borrows 1/n of the channels from each neighbour (2/n in all).
        layout: Which channels are borrowed: "embed" (official code) or "per_head" (paper Eq. 9); see
            `mixing_masks`.
        summary_token: Also give every frame the spatial means of all `num_frames` frames as extra
            keys and values (S + T keys).
        **attention_kwargs: Passed to `MultiHeadAttention` (qkv_bias, attn_drop, proj_drop,
            attention_impl).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        num_frames: int,
        shift_div: int,
        layout: MixLayout = "embed",
        summary_token: bool = False,
        **attention_kwargs: Any,
    ) -> None:
        super().__init__(dim, num_heads, **attention_kwargs)
        if shift_div:
            mixing_masks(num_heads, self.head_dim, shift_div, layout)  # fail early on a bad setting
        self.num_frames = num_frames
        self.shift_div = shift_div
        self.layout = layout
        self.summary_token = summary_token

    def mix(self, x: Tensor) -> Tensor:
        """Mixed keys or values, plus the clip's frame summaries when enabled: (B*T, heads, S', dh)."""
        mixed = space_time_mix(x, self.num_frames, self.shift_div, self.layout)
        if not self.summary_token:
            return mixed
        return torch.cat([mixed, frame_summaries(x, self.num_frames)], dim=2)

    def transform_keys_values(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        return self.mix(key), self.mix(value)

    def extra_repr(self) -> str:
        return f"num_frames={self.num_frames}, shift_div={self.shift_div}, layout={self.layout!r}"


class XViT(VideoTransformer):
    """X-ViT: clips (B, C, T, H, W) -> logits (B, num_classes).

    Args:
        num_frames: Frames per input clip T; a multiple of `tubelet_size` (and of 8 with
            `official_compat`).
        tubelet_size: Frames per token; mixing then runs between the T' = T / tubelet_size steps.
        shift_div: Space-time mixing: 0 = none (per-frame spatial attention only); n >= 2 replaces 1/n
            of the key/value channels by frame t+1's and 1/n by frame t-1's (2/n in all; 4 = half).
        mix_layout: Which channels are mixed. "embed" (official code): the first C/n channels of the
            whole embedding come from t+1, the next C/n from t-1. "per_head" (paper Eq. 9): in every
            head, the first head_dim/n from t-1 and the last head_dim/n from t+1.
        temporal_head: "attention": `TemporalAttentionHead` (one transformer layer over a learned
            token and the T' class tokens); "average": mean of the T' class-token features, then linear.
        summary_token: Add every frame's spatial mean (over its segment) as extra keys and values.
        temporal_embedding: Add a learned, zero-initialised embedding per time step (1, T', 1, D) to
            every token of that step, class token included; False: none.
        official_compat: Reproduce the released code: 8 temporal-embedding slots reused cyclically
            (frames 8..15 get slots 0..7), mixing in independent 8-frame segments, and the IN-21k
            ViT's Linear+tanh pre-logits before the head. Needs `tubelet_size` 1.
        segment_frames: Time steps per independently mixed segment (no mixing across a segment
            boundary; must divide T'). None: the whole clip, or 8 with `official_compat` as in the
            Kinetics configs; the released SSv2 model used 16.
        **kwargs: Passed to `VideoTransformer` / `ViTEncoder` (num_classes, img_size, embed_dim, ...).
    """

    def __init__(
        self,
        *,
        num_frames: int = 8,
        tubelet_size: int = 1,
        shift_div: int = 4,
        mix_layout: MixLayout = "embed",
        temporal_head: TemporalHead = "attention",
        summary_token: bool = False,
        temporal_embedding: bool = True,
        official_compat: bool = False,
        segment_frames: int | None = None,
        **kwargs: Any,
    ) -> None:
        if temporal_head not in TEMPORAL_HEADS:
            raise ValueError(f"temporal_head must be one of {TEMPORAL_HEADS}, got {temporal_head!r}")
        if official_compat and (tubelet_size != 1 or num_frames % OFFICIAL_SEGMENTS):
            raise ValueError(
                f"official_compat needs per-frame tokens and a multiple of {OFFICIAL_SEGMENTS} frames"
            )
        token_frames = num_frames // tubelet_size
        if segment_frames is None:
            segment_frames = OFFICIAL_SEGMENTS if official_compat else token_frames
        if token_frames % segment_frames:
            raise ValueError(f"{token_frames} frames do not split into segments of {segment_frames}")
        attention = partial(
            SpaceTimeMixingAttention,
            num_frames=segment_frames,
            shift_div=shift_div,
            layout=mix_layout,
            summary_token=summary_token,
        )
        super().__init__(
            num_frames=num_frames,
            tubelet_size=tubelet_size,
            block_cls=partial(TransformerBlock, attention_cls=attention),
            **kwargs,
        )
        dim = self.embed_dim
        embed_slots = OFFICIAL_SEGMENTS if official_compat else token_frames
        self.temporal_embed = (
            nn.Parameter(torch.zeros(1, embed_slots, 1, dim)) if temporal_embedding else None
        )
        self.pre_logits = (
            nn.Sequential(OrderedDict(fc=nn.Linear(dim, dim), act=nn.Tanh()))
            if official_compat
            else nn.Identity()
        )
        self.head: TemporalAttentionHead | TemporalAverageHead = (
            TemporalAttentionHead(
                dim,
                self.num_heads,
                self.num_classes,
                dropout=self.head_dropout,
                attention_impl=self.attention_impl,
            )
            if temporal_head == "attention"
            else TemporalAverageHead(dim, self.num_classes, self.head_dropout)
        )
        self.init_weights()

    def forward_features(self, clips: Tensor) -> Tensor:
        """Per-frame class-token features (B, T', D) (through pre_logits in official_compat mode)."""
        x = self.frame_sequences(clips)  # (B, T', 1 + N, D)
        if self.temporal_embed is not None:
            # (B, T'/slots, slots, 1 + N, D) + (1, slots, 1, D): official_compat reuses 8 slots
            slots = self.temporal_embed.shape[1]
            x = (x.unflatten(1, (-1, slots)) + self.temporal_embed).flatten(1, 2)
        return self.pre_logits(self.encode_frames(x))
