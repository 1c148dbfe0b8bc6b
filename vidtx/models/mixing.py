"""X-ViT's space-time mixing (Bulat et al. 2021, section 3): per-frame attention whose keys and
values borrow channels from neighbouring frames, so it costs what spatial-only attention costs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor

from vidtx.nn import MultiHeadAttention

MixLayout = Literal["embed", "per_head"]
MixTarget = Literal["kv", "k", "v", "x"]
MixLayers = Literal["all", "first_half", "second_half", "odd"]
MIX_LAYOUTS: tuple[str, ...] = ("embed", "per_head")
MIX_TARGETS: tuple[str, ...] = ("kv", "k", "v", "x")
MIX_LAYERS: tuple[str, ...] = ("all", "first_half", "second_half", "odd")
_SLOTS = {"k": (1,), "v": (2,), "kv": (1, 2)}  # slots of the fused q | k | v projection output

Move = tuple[
    int, int, int
]  # (offset, start, stop): channels [start, stop) of frame t come from frame t + offset


def window_offsets(window: int = 1, boundaries_only: bool = False) -> tuple[int, ...]:
    """The neighbours that lend channels, in the order they take channel folds: +1, -1, +2, -2, ...
    (paper, Table 1: a window of 1 or 2 frames each side, or only the frames at distance 2)."""
    if window < 1:
        raise ValueError(f"mix_window must be >= 1, got {window}")
    distances = [window] if boundaries_only else range(1, window + 1)
    return tuple(offset for distance in distances for offset in (distance, -distance))


def channel_moves(
    num_heads: int, head_dim: int, shift_div: int, layout: MixLayout, offsets: tuple[int, ...] = (1, -1)
) -> list[Move]:
    """Which channels a frame takes from which neighbour: one fold of channels per offset.

    "embed" (official code): ranges over the whole embedding, channel c = head * head_dim + j, folds
    of C/n in the order of `offsets` (so [0, C/n) from t+1, [C/n, 2C/n) from t-1). "per_head"
    (paper Eq. 9): ranges over j inside every head, ordered past | current | future: the past
    offsets' folds of head_dim/n first (t-w first), the future ones last (t+w last). Every other
    channel stays the frame's own.
    """
    if shift_div < 2:
        raise ValueError(f"shift_div must be 0 (no mixing) or >= 2, got {shift_div}")
    if layout not in MIX_LAYOUTS:
        raise ValueError(f"mix_layout must be one of {MIX_LAYOUTS}, got {layout!r}")
    width = num_heads * head_dim if layout == "embed" else head_dim
    fold = width // shift_div
    if fold == 0 or fold * len(offsets) > width:
        raise ValueError(
            f"shift_div {shift_div} cannot give {len(offsets)} neighbours a share of {width} channels ({layout})"
        )
    if layout == "embed":
        return [(offset, i * fold, (i + 1) * fold) for i, offset in enumerate(offsets)]
    past, future = sorted(o for o in offsets if o < 0), sorted(o for o in offsets if o > 0)
    moves = [(offset, i * fold, (i + 1) * fold) for i, offset in enumerate(past)]
    first_future = width - len(future) * fold
    return moves + [
        (offset, first_future + i * fold, first_future + (i + 1) * fold) for i, offset in enumerate(future)
    ]


def shift_channels_(frames: Tensor, moves: list[Move]) -> None:
    """Mix in place: `frames` (B, T, ..., C) with channels last; for each move, channels
    [start, stop) of frame t become those of frame t + offset, zeros where that is outside the clip.

    No temporary: frame by frame, in the order that reads every source before it is overwritten
    (t ascending when the band comes from later frames, descending when from earlier ones), so only
    the moved channels are read and written once. (A single copy from a shifted view would overlap
    its destination, which torch refuses; cloning the source first doubled the traffic.)"""
    num_frames = frames.shape[1]
    for offset, start, stop in moves:
        band = frames[..., start:stop]  # (B, T, ..., fold), a view
        if offset > 0:
            targets, outside = range(num_frames - offset), slice(max(num_frames - offset, 0), None)
        else:
            targets, outside = range(num_frames - 1, -offset - 1, -1), slice(0, -offset)
        for t in targets:
            band.select(1, t).copy_(band.select(1, t + offset))
        band[:, outside].zero_()


@dataclass(frozen=True)
class ChannelShift:
    """The in-place mixing of a projection's output (B*T, S, slots * heads * head_dim): in each of the
    given `slots` (0 = q, 1 = k, 2 = v of a fused qkv output; one slot for a block's input), `moves`
    of channels between the frames of every `num_frames`-frame clip, in `layout`."""

    num_frames: int
    num_slots: int
    slots: tuple[int, ...]
    num_heads: int
    layout: MixLayout
    moves: tuple[Move, ...]

    def apply_(self, tensor: Tensor, tokens: int) -> None:
        """Shift `tensor` in place: contiguous, B*T*`tokens` tokens of slots * heads * dh channels."""
        frames = tensor.view(
            -1,
            self.num_frames,
            tokens,
            self.num_slots,
            self.num_heads,
            tensor.shape[-1] // (self.num_slots * self.num_heads),
        )  # (B, T, S, slots, heads, dh)
        first, last = min(self.slots), max(self.slots)
        if last - first + 1 == len(self.slots):  # adjacent slots (k and v): shift them together
            part = frames[:, :, :, first : last + 1]  # (B, T, S, slots', heads, dh)
            shift_channels_(part.flatten(-2) if self.layout == "embed" else part, list(self.moves))
            return
        for slot in self.slots:
            part = frames[:, :, :, slot]  # (B, T, S, heads, dh)
            shift_channels_(part.flatten(-2) if self.layout == "embed" else part, list(self.moves))

    def reversed(self) -> ChannelShift:
        """The shift that carries a gradient back: band [start, stop) of frame t came from frame
        t + offset, so its gradient goes to frame t + offset (and the band's own gradient is zero)."""
        return replace(self, moves=tuple((-offset, start, stop) for offset, start, stop in self.moves))

    def __call__(self, tensor: Tensor, tokens: int) -> Tensor:
        """`tensor` (see `apply_`), mixed in place; one autograd node when it needs a gradient. It
        must not be a view: autograd would then copy its base's whole gradient (CopySlices)."""
        if not self.moves:
            return tensor
        if torch.is_grad_enabled() and tensor.requires_grad:
            return _ShiftInPlace.apply(tensor, self, tokens)
        self.apply_(tensor, tokens)
        return tensor


class _ShiftInPlace(torch.autograd.Function):
    """One node for the whole shift. Written as plain in-place writes into views, every write would be
    a node whose backward copies the full gradient of the buffer (autograd's CopySlices): eight copies
    of the qkv gradient per X-ViT block, where this node copies only the moved channels."""

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, shift: ChannelShift, tokens: int) -> Tensor:
        ctx.shift, ctx.tokens = shift, tokens
        ctx.mark_dirty(tensor)
        shift.apply_(tensor, tokens)
        return tensor

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        # The gradient is shifted back in place, as the forward shifted the buffer in place (as
        # flash-attn's in-place rotary embedding does): the only consumer of this node's output is
        # the attention's own head split, whose backward hands over a new, contiguous gradient.
        if not grad.is_contiguous():
            grad = grad.contiguous()
        ctx.shift.reversed().apply_(grad, ctx.tokens)
        return grad, None, None


def space_time_mix(
    x: Tensor,
    num_frames: int,
    shift_div: int,
    layout: MixLayout = "embed",
    offsets: tuple[int, ...] = (1, -1),
) -> Tensor:
    """Keys or values (B*T, heads, S, head_dim) mixed across neighbouring frames; same shape out.

    Frames are batch-major, time-minor (row b*T + t is frame t of clip b). A fraction
    len(offsets)/shift_div of the channels of frame t is replaced by the same channels of the frames
    t + offset (`channel_moves` says which); frames outside the clip contribute zeros. `shift_div=0`
    turns mixing off (x is returned as is). The attention mixes its projection's output in place
    instead (`SpaceTimeMixingAttention`); this out-of-place form is the reference.
    """
    if shift_div == 0:
        return x
    batch_frames, num_heads, _, head_dim = x.shape
    if batch_frames % num_frames:
        raise ValueError(f"{batch_frames} rows are not a whole number of {num_frames}-frame clips")
    moves = channel_moves(num_heads, head_dim, shift_div, layout, offsets)
    frames = (
        x.unflatten(0, (-1, num_frames)).permute(0, 1, 3, 2, 4).clone(memory_format=torch.contiguous_format)
    )
    shift_channels_(frames.flatten(-2) if layout == "embed" else frames, moves)
    return frames.permute(0, 1, 3, 2, 4).flatten(0, 1)  # (B*T, heads, S, dh)


def frame_summaries(x: Tensor, num_frames: int) -> Tensor:
    """Summary tokens (paper, section 3): the spatial mean of every frame of the clip, given to each of
    its frames as extra keys or values: (B*T, heads, S, dh) -> (B*T, heads, T, dh)."""
    frames = x.unflatten(0, (-1, num_frames))  # (B, T, heads, S, dh)
    summaries = frames.mean(dim=3).transpose(1, 2)  # (B, heads, T, dh)
    return summaries[:, None].expand(-1, num_frames, -1, -1, -1).flatten(0, 1)  # (B*T, heads, T, dh)


class SpaceTimeMixingAttention(MultiHeadAttention):
    """Per-frame spatial attention whose keys and values are mixed across neighbouring frames.

    The mixing writes into the qkv projection's output in place: the only copies are the moved
    channels, so the attention costs what spatial-only attention costs (paper, section 3).

    Args:
        dim: Token width D.
        num_heads: Attention heads; must divide `dim`.
        num_frames: Frames per clip (or per independently mixed segment) in the (B*T, S, D) input rows.
        shift_div: 0 = no mixing; n >= 2 gives each neighbour 1/n of the channels.
        layout: Which channels are mixed: "embed" (official code) or "per_head" (paper Eq. 9); see
            `channel_moves`.
        offsets: The neighbours that lend channels (`window_offsets`; default t+1 and t-1).
        target: What is mixed: "kv" (keys and values, the paper's choice), "k", "v", or "x" (the
            attention's input tokens, so queries too; paper, Table 2c).
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
        offsets: tuple[int, ...] = (1, -1),
        target: MixTarget = "kv",
        summary_token: bool = False,
        **attention_kwargs: Any,
    ) -> None:
        super().__init__(dim, num_heads, **attention_kwargs)
        if target not in MIX_TARGETS:
            raise ValueError(f"mix_target must be one of {MIX_TARGETS}, got {target!r}")
        self.num_frames = num_frames
        self.shift_div = shift_div
        self.layout = layout
        self.target = target
        self.summary_token = summary_token
        heads, head_dim = (1, dim) if target == "x" else (num_heads, self.head_dim)
        moves = channel_moves(heads, head_dim, shift_div, layout, offsets) if shift_div else []
        self.shift = (
            ChannelShift(num_frames, 1, (0,), 1, "embed", tuple(moves))
            if target == "x"
            else ChannelShift(num_frames, 3, _SLOTS[target], num_heads, layout, tuple(moves))
        )

    @property
    def moves(self) -> tuple[Move, ...]:
        return self.shift.moves

    def disable_mixing(self) -> None:
        """Spatial-only attention in this block (the paper's mixing-in-some-layers ablation)."""
        self.shift = replace(self.shift, moves=())

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.target == "x":
            x = self.shift(x.clone(), x.shape[1])  # (B*T, S, D); the block's input is its residual too
        return super().forward(x, mask)

    def transform_qkv(self, qkv: Tensor, tokens: int) -> Tensor:
        """Mix keys and/or values in place: qkv (B*T*S, 3 * D)."""
        return qkv if self.target == "x" else self.shift(qkv, tokens)

    def transform_keys_values(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        if not self.summary_token:
            return key, value
        return (
            torch.cat([key, frame_summaries(key, self.num_frames)], dim=2),
            torch.cat([value, frame_summaries(value, self.num_frames)], dim=2),
        )

    def extra_repr(self) -> str:
        return f"num_frames={self.num_frames}, shift_div={self.shift_div}, layout={self.layout!r}, target={self.target!r}"
