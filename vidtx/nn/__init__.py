"""Building blocks of the vidtx models: attention, embeddings, transformer blocks."""

from vidtx.nn.attention import (
    ATTENTION_IMPLS,
    AdditiveAttention,
    AttentionImpl,
    DotProductAttention,
    MultiHeadAttention,
    length_mask,
    masked_softmax,
    scaled_dot_product_attention,
    softmax_with_mask,
)
from vidtx.nn.blocks import DropPath, Mlp, TransformerBlock, drop_path_rates, run_blocks
from vidtx.nn.embeddings import (
    LearnedPositionalEmbedding,
    PatchEmbed,
    SinusoidalPositionalEmbedding,
    TubeletEmbed,
    resize_pos_embed,
    sinusoidal_table,
)

__all__ = [
    "ATTENTION_IMPLS",
    "AdditiveAttention",
    "AttentionImpl",
    "DotProductAttention",
    "DropPath",
    "LearnedPositionalEmbedding",
    "Mlp",
    "MultiHeadAttention",
    "PatchEmbed",
    "SinusoidalPositionalEmbedding",
    "TransformerBlock",
    "TubeletEmbed",
    "drop_path_rates",
    "length_mask",
    "masked_softmax",
    "resize_pos_embed",
    "run_blocks",
    "scaled_dot_product_attention",
    "sinusoidal_table",
    "softmax_with_mask",
]
