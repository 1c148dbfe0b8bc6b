"""Transformer building blocks: stochastic depth, the MLP and the pre-norm block (timm's names), and
running a stack of blocks with activation checkpointing."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from vidtx.nn.attention import AttentionImpl, MultiHeadAttention


def run_blocks(blocks: nn.Sequential, tokens: Tensor, checkpoint_every: int = 0) -> Tensor:
    """`blocks(tokens)`, with activation checkpointing of blocks 0, k, 2k, ... (k = `checkpoint_every`;
    0: none) while gradients are on: such a block keeps only its input, and its forward runs again in
    the backward pass (torch's non-reentrant `checkpoint`, which replays the RNG state, so dropout and
    stochastic depth draw what they drew). Its gradients are those of the plain forward."""
    if checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be >= 0, got {checkpoint_every}")
    for index, block in enumerate(blocks):
        if checkpoint_every and index % checkpoint_every == 0 and torch.is_grad_enabled():
            tokens = checkpoint(block, tokens, use_reentrant=False)
        else:
            tokens = block(tokens)
    return tokens


def drop_path_rates(rate: float, depth: int) -> list[float]:
    """Stochastic-depth rates rising linearly from 0 (first block) to `rate` (last block)."""
    return [rate * index / max(depth - 1, 1) for index in range(depth)]


class DropPath(nn.Module):
    """Stochastic depth: in training, zero a residual branch for a random subset of samples.

    Kept samples are scaled by 1 / (1 - p) so the expected output is unchanged; identity in eval.
    """

    def __init__(self, drop_prob: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= drop_prob < 1.0:
            raise ValueError(f"drop_prob must be in [0, 1), got {drop_prob}")
        self.drop_prob = drop_prob

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.drop_prob == 0.0:
            return x
        keep_prob = 1.0 - self.drop_prob
        keep = torch.empty((x.shape[0],) + (1,) * (x.dim() - 1), dtype=x.dtype, device=x.device)
        return x * keep.bernoulli_(keep_prob) / keep_prob

    def extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob}"


class Mlp(nn.Module):
    """Linear -> GELU -> Linear, with dropout after each."""

    def __init__(self, dim: int, hidden_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + DropPath(MHA(LN(x))), then x + DropPath(MLP(LN(x))).

    `attention_cls` builds the attention (called with dim, num_heads and keyword arguments); X-ViT passes
    its space-time mixing attention here.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_path: float = 0.0,
        dropout: float = 0.0,
        norm_eps: float = 1e-6,
        attention_impl: AttentionImpl = "auto",
        attention_cls: Callable[..., MultiHeadAttention] = MultiHeadAttention,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = attention_cls(
            dim, num_heads, qkv_bias=qkv_bias, proj_drop=dropout, attention_impl=attention_impl
        )
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), dropout)
        self.drop_path = DropPath(drop_path)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        # x (B, S, D) -> (B, S, D)
        x = x + self.drop_path(self.attn(self.norm1(x), mask))
        return x + self.drop_path(self.mlp(self.norm2(x)))
