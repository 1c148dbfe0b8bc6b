"""Baselines that attend over one sequence of all the clip's patches: joint space-time attention and
TimeSformer's divided space-time attention (Bertasius et al., ICML 2021).

Tokens: one class token, then the T'·N patches frame after frame, each with its spatial position and
a temporal embedding of its frame (zero at init, class token excluded).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from vidtx.models.heads import ClassifierHead
from vidtx.models.video import VideoTransformer
from vidtx.nn import AttentionImpl, DropPath, Mlp, MultiHeadAttention


class JointSpaceTime(VideoTransformer):
    """Full attention over all 1 + T'·N tokens (ViViT model 1, TimeSformer "joint"): cost O((T'N)²).
    VideoMAE's own encoder: it encodes any visible subset of the tokens (tube or random masking).

    A learned temporal embedding (1, T', 1, D), zero at init, is added to every patch token of its
    time step; the head is a `ClassifierHead` on the final class token.

    Args:
        **kwargs: Passed to `VideoTransformer` / `ViTEncoder` (num_classes, num_frames, head_dropout,
            img_size, patch_size, embed_dim, depth, tubelet_size, ...).
    """

    MASKINGS = ("tube", "random")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.temporal_embed = nn.Parameter(torch.zeros(1, self.token_frames, 1, self.embed_dim))
        self.head = ClassifierHead(self.embed_dim, self.num_classes, self.head_dropout)
        self.init_weights()

    def forward_features(self, clips: Tensor) -> Tensor:
        """The final class-token feature: (B, D)."""
        patches = self.patch_tokens(clips) + self.temporal_embed  # (B, T', N, D)
        cls = self.class_token().expand(patches.shape[0], -1, -1)  # (B, 1, D)
        return self.encode(torch.cat([cls, patches.flatten(1, 2)], dim=1))[:, 0]  # (B, D)

    def encode_visible(self, clips: Tensor, visible: Tensor) -> Tensor:
        """The final features of the visible patches only, (B, K, D) for `visible` (B, K) indices into
        the T'·N tokens (frame-major): the class token and those K run through the blocks; the hidden
        patches never do."""
        patches = (self.patch_tokens(clips) + self.temporal_embed).flatten(1, 2)  # (B, T'·N, D)
        kept = patches.gather(1, visible[..., None].expand(-1, -1, patches.shape[-1]))  # (B, K, D)
        cls = self.class_token().expand(kept.shape[0], -1, -1)  # (B, 1, D)
        return self.encode(torch.cat([cls, kept], dim=1))[:, 1:]  # (B, K, D)


class DividedSpaceTimeBlock(nn.Module):
    """TimeSformer block over (B, 1 + T·N, D): attention over time at every patch position, then over
    space within every frame, then the MLP; each pre-norm with a residual.

    The temporal branch has its own norm, attention and an output projection (`temporal_fc`) that
    starts at zero, so a fresh block equals a ViT block. In the spatial step every frame sees a copy of
    the class token; the class token's update is the mean of its per-frame updates. The spatial part
    uses timm's names (norm1, attn, norm2, mlp) so image-ViT weights load into it.

    Args:
        dim: Token width D.
        num_heads: Attention heads of both the temporal and the spatial attention.
        num_frames: Time steps T in the token sequence (frames / tubelet_size).
        mlp_ratio: MLP hidden width as a multiple of `dim`.
        qkv_bias: Add a bias to both qkv projections.
        drop_path: Stochastic-depth rate of each of the three residual branches.
        norm_eps: Epsilon of the LayerNorms.
        attention_impl: "auto" / "sdpa" (torch's fused kernel) or "math" (explicit softmax).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        num_frames: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_path: float = 0.0,
        norm_eps: float = 1e-6,
        attention_impl: AttentionImpl = "auto",
    ) -> None:
        super().__init__()
        self.num_frames = num_frames
        attention = partial(
            MultiHeadAttention, dim, num_heads, qkv_bias=qkv_bias, attention_impl=attention_impl
        )
        self.temporal_norm = nn.LayerNorm(dim, eps=norm_eps)
        self.temporal_attn = attention()
        self.temporal_fc = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = attention()
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.drop_path = DropPath(drop_path)

    def zero_init_last(self) -> None:
        nn.init.zeros_(self.temporal_fc.weight)
        nn.init.zeros_(self.temporal_fc.bias)

    def forward(self, x: Tensor) -> Tensor:
        cls, patches = x[:, :1], x[:, 1:]  # (B, 1, D), (B, T*N, D)
        batch = x.shape[0]
        patches = patches.unflatten(1, (self.num_frames, -1))  # (B, T, N, D)
        num_patches = patches.shape[2]

        # time: every patch position attends over its T frames
        series = patches.transpose(1, 2).flatten(0, 1)  # (B*N, T, D)
        update = self.temporal_fc(self.temporal_attn(self.temporal_norm(series)))  # (B*N, T, D)
        patches = patches + self.drop_path(update.unflatten(0, (batch, num_patches)).transpose(1, 2))

        # space: every frame, with a copy of the class token, attends over its N patches
        frames = torch.cat(
            [cls[:, None].expand(-1, self.num_frames, -1, -1), patches], dim=2
        )  # (B, T, 1+N, D)
        update = self.attn(self.norm1(frames.flatten(0, 1))).unflatten(0, (batch, self.num_frames))
        update = torch.cat([update[:, :, 0].mean(dim=1, keepdim=True), update[:, :, 1:].flatten(1, 2)], dim=1)
        x = torch.cat([cls, patches.flatten(1, 2)], dim=1) + self.drop_path(update)  # (B, 1 + T*N, D)
        return x + self.drop_path(self.mlp(self.norm2(x)))


class TimeSformer(JointSpaceTime):
    """TimeSformer with divided space-time attention: cost O(T'N² + T'²N) per layer. Its blocks
    attend over time at every position, so it encodes tube-masked clips only (the same positions
    visible at every step).

    Every block is a `DividedSpaceTimeBlock`; embeddings and head are those of `JointSpaceTime`.

    Args:
        num_frames: Frames per input clip T; a multiple of `tubelet_size`.
        tubelet_size: Frames per token; the blocks attend over T' = T / tubelet_size steps.
        **kwargs: Passed to `VideoTransformer` / `ViTEncoder` (num_classes, img_size, embed_dim, ...).
    """

    MASKINGS = ("tube",)

    def __init__(self, *, num_frames: int = 8, tubelet_size: int = 1, **kwargs: Any) -> None:
        super().__init__(
            num_frames=num_frames,
            tubelet_size=tubelet_size,
            block_cls=partial(DividedSpaceTimeBlock, num_frames=num_frames // tubelet_size),
            **kwargs,
        )
