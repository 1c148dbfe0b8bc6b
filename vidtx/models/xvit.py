"""X-ViT: space-time mixing attention (Bulat et al., "Space-time Mixing Attention for Video
Transformer", NeurIPS 2021).

Each frame runs the spatial attention of an image ViT (one class token per frame, cost O(T·S²) like
a ViT applied to every frame), but its keys and values borrow a fraction of their channels from the
neighbouring frames t-1 and t+1. Queries are never mixed. A temporal head (one transformer layer over
a learned token and the T per-frame class tokens, or plain averaging) makes the clip prediction.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import torch
from torch import Tensor, nn

from vidtx.models.heads import TemporalAttentionHead, TemporalAverageHead
from vidtx.models.mixing import (
    MIX_LAYERS,
    MixLayers,
    MixLayout,
    MixTarget,
    SpaceTimeMixingAttention,
    window_offsets,
)
from vidtx.models.video import VideoTransformer
from vidtx.nn import TransformerBlock

TemporalHead = Literal["attention", "average"]
TEMPORAL_HEADS: tuple[str, ...] = ("attention", "average")
OFFICIAL_SEGMENTS = 8  # the released code's temporal embedding slots and shift chunk length


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
            (frames 8..15 get slots 0..7) and mixing in independent 8-frame segments. (Its ViT has no
            pre-logits layer: timm drops the IN-21k representation layer for another class count.)
            Needs `tubelet_size` 1.
        segment_frames: Time steps per independently mixed segment (no mixing across a segment
            boundary; must divide T'). None: the whole clip, or 8 with `official_compat` as in the
            Kinetics configs; the released SSv2 model used 16.
        frame_dropout: Dropout on the per-frame features before the temporal head (the released
            code's 0.5: its backbone's classifier is replaced by a dropout).
        mix_window: Neighbours on each side that lend channels (paper's t_w; 1 or 2 in Table 1).
        mix_boundaries_only: With `mix_window` w, only frames t-w and t+w lend channels.
        mix_layers: The blocks that mix: "all", "first_half", "second_half" or "odd" (Table 2b).
        mix_target: What is mixed: "kv", "k", "v", or "x", the attention's input (Table 2c).
        temporal_depth: Transformer layers of the temporal-attention head (Table 2d).
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
        frame_dropout: float = 0.0,
        mix_window: int = 1,
        mix_boundaries_only: bool = False,
        mix_layers: MixLayers = "all",
        mix_target: MixTarget = "kv",
        temporal_depth: int = 1,
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
        if mix_layers not in MIX_LAYERS:
            raise ValueError(f"mix_layers must be one of {MIX_LAYERS}, got {mix_layers!r}")
        attention = partial(
            SpaceTimeMixingAttention,
            num_frames=segment_frames,
            shift_div=shift_div,
            layout=mix_layout,
            offsets=window_offsets(mix_window, mix_boundaries_only),
            target=mix_target,
            summary_token=summary_token,
        )
        super().__init__(
            num_frames=num_frames,
            tubelet_size=tubelet_size,
            block_cls=partial(TransformerBlock, attention_cls=attention),
            **kwargs,
        )
        depth = len(self.blocks)
        mixing = {
            "all": range(depth),
            "first_half": range(depth // 2),
            "second_half": range(depth // 2, depth),
            "odd": range(1, depth, 2),
        }[mix_layers]
        for index, block in enumerate(self.blocks):
            if index not in mixing:
                block.attn.disable_mixing()
        dim = self.embed_dim
        embed_slots = OFFICIAL_SEGMENTS if official_compat else token_frames
        self.temporal_embed = (
            nn.Parameter(torch.zeros(1, embed_slots, 1, dim)) if temporal_embedding else None
        )
        self.frame_drop = nn.Dropout(frame_dropout)
        self.head: TemporalAttentionHead | TemporalAverageHead = (
            TemporalAttentionHead(
                dim,
                self.num_heads,
                self.num_classes,
                depth=temporal_depth,
                dropout=self.head_dropout,
                attention_impl=self.attention_impl,
            )
            if temporal_head == "attention"
            else TemporalAverageHead(dim, self.num_classes, self.head_dropout)
        )
        self.init_weights()

    MASKINGS = ("tube",)  # every frame must keep the same positions: its keys mix with its neighbours'

    def _sequences(self, clips: Tensor) -> Tensor:
        """Each time step's class token and patches with their positions: (B, T', 1 + N, D)."""
        x = self.frame_sequences(clips)  # (B, T', 1 + N, D)
        if self.temporal_embed is not None:
            # (B, T'/slots, slots, 1 + N, D) + (1, slots, 1, D): official_compat reuses 8 slots
            slots = self.temporal_embed.shape[1]
            x = (x.unflatten(1, (-1, slots)) + self.temporal_embed).flatten(1, 2)
        return x

    def forward_features(self, clips: Tensor) -> Tensor:
        """Per-frame class-token features (B, T', D), after `frame_dropout`."""
        return self.frame_drop(self.encode_frames(self._sequences(clips)))

    def encode_visible(self, clips: Tensor, visible: Tensor) -> Tensor:
        """The final features of the visible patches only, (B, K, D) for `visible` (B, K) indices into
        the T'·N tokens: a tube mask (the same S positions at every step, K = T'·S). Each step's
        class token and S patches run through the blocks; the hidden patches never do."""
        batch, steps, dim = clips.shape[0], self.token_frames, self.embed_dim
        positions = visible.unflatten(1, (steps, -1)) % self.patch_embed.num_patches  # (B, T', S)
        if not bool((positions == positions[:, :1]).all()):
            raise ValueError("X-ViT encodes tube-masked clips only: every step must keep the same positions")
        x = self._sequences(clips)  # (B, T', 1 + N, D)
        spatial = positions[:, :1, :, None].expand(-1, steps, -1, dim)  # (B, T', S, D)
        x = torch.cat([x[:, :, :1], x[:, :, 1:].gather(2, spatial)], dim=2)  # (B, T', 1 + S, D)
        patches = self.encode(x.flatten(0, 1))[:, 1:]  # (B·T', S, D)
        return patches.unflatten(0, (batch, steps)).flatten(1, 2)  # (B, T'·S, D)
