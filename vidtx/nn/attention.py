"""Attention: masked softmax, additive and scaled dot-product attention, multi-head attention.

Every dot-product attention in vidtx goes through `scaled_dot_product_attention`, which dispatches to
torch's fused `F.scaled_dot_product_attention` (flash / memory-efficient kernels on GPU, flash on CPU)
or to the explicit math path softmax(QKᵀ/√d)V that is easy to read, check and export.

Masks are boolean with True = "may attend", the convention of `F.scaled_dot_product_attention`.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

AttentionImpl = Literal["auto", "sdpa", "math"]
ATTENTION_IMPLS: tuple[str, ...] = ("auto", "sdpa", "math")


def length_mask(valid_lens: Tensor, num_keys: int) -> Tensor:
    """Boolean key mask from valid lengths: (B,) -> (B, 1, K) or (B, Q) -> (B, Q, K); True = valid."""
    positions = torch.arange(num_keys, device=valid_lens.device)
    if valid_lens.dim() == 1:
        valid_lens = valid_lens[:, None]  # (B, 1): the same length for every query
    return positions < valid_lens[..., None]  # (B, Q or 1, K)


def softmax_with_mask(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax over the last dim where masked positions (mask False) get exactly zero weight.

    A row whose every key is masked gets all-zero weights instead of NaN.
    """
    if mask is None:
        return scores.softmax(dim=-1)
    lowest = torch.finfo(scores.dtype).min
    weights = scores.masked_fill(~mask, lowest).softmax(dim=-1)
    return weights.masked_fill(~mask, 0.0)


def masked_softmax(scores: Tensor, valid_lens: Tensor | None = None) -> Tensor:
    """Softmax of `scores` (B, ..., Q, K) keeping only the first `valid_lens` keys.

    `valid_lens` is (B,) (one length per batch element) or (B, Q) (one per query); keys at positions
    >= the valid length get exactly zero weight.
    """
    if valid_lens is None:
        return scores.softmax(dim=-1)
    mask = length_mask(valid_lens, scores.shape[-1])  # (B, Q or 1, K)
    mask = mask.view(mask.shape[0], *([1] * (scores.dim() - 3)), *mask.shape[1:])  # broadcast over heads
    return softmax_with_mask(scores, mask)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    impl: AttentionImpl = "auto",
) -> Tensor:
    """softmax(Q Kᵀ / √d) V over the last two dims: (..., Q, d), (..., K, d), (..., K, dv) -> (..., Q, dv).

    `impl`: "auto" and "sdpa" call `F.scaled_dot_product_attention` (torch picks the fastest kernel for
    the device and dtype); "math" computes the product explicitly.
    """
    if impl == "math":
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (..., Q, K)
        weights = F.dropout(softmax_with_mask(scores, mask), dropout_p)
        return weights @ value
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention with valid lengths (batch-first, no projections)."""

    def __init__(self, dropout: float = 0.0, impl: AttentionImpl = "auto") -> None:
        super().__init__()
        self.dropout = dropout
        self.impl = impl

    def forward(self, query: Tensor, key: Tensor, value: Tensor, valid_lens: Tensor | None = None) -> Tensor:
        # query (B, Q, d), key (B, K, d), value (B, K, dv) -> (B, Q, dv)
        mask = None if valid_lens is None else length_mask(valid_lens, key.shape[-2])
        dropout_p = self.dropout if self.training else 0.0
        return scaled_dot_product_attention(query, key, value, mask=mask, dropout_p=dropout_p, impl=self.impl)


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention: score(q, k) = wᵀ tanh(W_q q + W_k k); works for any dq, dk."""

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, hidden_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, hidden_dim, bias=False)
        self.score = nn.Linear(hidden_dim, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, valid_lens: Tensor | None = None) -> Tensor:
        # query (B, Q, dq), key (B, K, dk), value (B, K, dv) -> (B, Q, dv)
        features = torch.tanh(
            self.query_proj(query)[:, :, None] + self.key_proj(key)[:, None]
        )  # (B, Q, K, h)
        scores = self.score(features).squeeze(-1)  # (B, Q, K)
        return self.dropout(masked_softmax(scores, valid_lens)) @ value


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention with a fused qkv projection (timm's layout and parameter names).

    Subclasses change which keys and values each query sees without touching the projections, by
    overriding `transform_qkv` (X-ViT mixes the projection's output across neighbouring frames, in
    place) or `transform_keys_values` (e.g. to append keys).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        attention_impl: AttentionImpl = "auto",
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        if attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLS}, got {attention_impl!r}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.attention_impl = attention_impl
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def transform_qkv(self, qkv: Tensor, tokens: int) -> Tensor:
        """Hook on the projection's output (B*S rows of `tokens` tokens each, 3 * D: q | k | v, each
        head-major), before the heads are split. It is the projection's own buffer, not a view, so
        a subclass may change it in place as one autograd node. Identity here."""
        return qkv

    def transform_keys_values(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Hook between the projection and the attention; (B, heads, S, dh) each. Identity here."""
        return key, value

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        # x (B, S, D); mask broadcastable to (B, heads, S, S'), True = attend
        batch, tokens, _ = x.shape
        qkv = self.transform_qkv(self.qkv(x.reshape(batch * tokens, -1)), tokens)  # (B*S, 3*D)
        qkv = qkv.view(batch, tokens, 3, self.num_heads, self.head_dim)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B, heads, S, dh) each
        key, value = self.transform_keys_values(key, value)  # (B, heads, S', dh) each
        dropout_p = self.attn_drop if self.training else 0.0
        out = scaled_dot_product_attention(
            query, key, value, mask=mask, dropout_p=dropout_p, impl=self.attention_impl
        )  # (B, heads, S, dh)
        return self.proj_drop(self.proj(out.transpose(1, 2).flatten(2)))  # (B, S, D)
