"""Building blocks against plain reference computations (loops, explicit formulas, torch.nn)."""

import math

import pytest
import torch
from torch import nn

from vidtx.nn import (
    AdditiveAttention,
    DotProductAttention,
    DropPath,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    PatchEmbed,
    SinusoidalPositionalEmbedding,
    TransformerBlock,
    TubeletEmbed,
    masked_softmax,
    resize_pos_embed,
    scaled_dot_product_attention,
    sinusoidal_table,
)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).norm() / expected.norm()).item()


def reference_masked_softmax(scores: torch.Tensor, lengths: list[list[int]]) -> torch.Tensor:
    """Row by row: softmax over the first `length` keys, zeros after (all zeros if length is 0)."""
    out = torch.zeros_like(scores)
    for b in range(scores.shape[0]):
        for q in range(scores.shape[1]):
            length = lengths[b][q]
            if length:
                out[b, q, :length] = torch.softmax(scores[b, q, :length], dim=0)
    return out


def test_masked_softmax_per_batch_lengths() -> None:
    scores = torch.randn(3, 4, 6)
    valid = torch.tensor([2, 6, 0])
    expected = reference_masked_softmax(scores, [[n] * 4 for n in valid.tolist()])
    result = masked_softmax(scores, valid)
    torch.testing.assert_close(result, expected)
    assert (result[0, :, 2:] == 0).all()  # masked positions get exactly zero weight
    assert (result[2] == 0).all()  # no valid key: zeros, not NaN


def test_masked_softmax_per_query_lengths_and_heads() -> None:
    scores = torch.randn(2, 3, 5, 7)  # (B, heads, Q, K)
    valid = torch.tensor([[1, 2, 3, 4, 7], [7, 5, 3, 1, 0]])  # (B, Q)
    result = masked_softmax(scores, valid)
    for head in range(3):
        torch.testing.assert_close(result[:, head], reference_masked_softmax(scores[:, head], valid.tolist()))
    torch.testing.assert_close(masked_softmax(scores), scores.softmax(-1))


def test_additive_attention_matches_loop() -> None:
    attention = AdditiveAttention(query_dim=5, key_dim=3, hidden_dim=8).eval()
    queries, keys, values = torch.randn(2, 4, 5), torch.randn(2, 6, 3), torch.randn(2, 6, 2)
    valid = torch.tensor([3, 6])
    expected = torch.zeros(2, 4, 2)
    for b in range(2):
        for q in range(4):
            n = valid[b].item()
            scores = torch.stack(
                [
                    attention.score.weight[0]
                    @ torch.tanh(
                        attention.query_proj.weight @ queries[b, q] + attention.key_proj.weight @ keys[b, k]
                    )
                    for k in range(n)
                ]
            )
            expected[b, q] = torch.softmax(scores, 0) @ values[b, :n]
    torch.testing.assert_close(attention(queries, keys, values, valid), expected)


@pytest.mark.parametrize("impl", ["auto", "sdpa", "math"])
def test_scaled_dot_product_matches_formula(impl: str) -> None:
    query, key, value = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    scores = (query @ key.transpose(-1, -2) / math.sqrt(8)).masked_fill(~mask, float("-inf"))
    expected = scores.softmax(-1) @ value
    result = scaled_dot_product_attention(query, key, value, mask=mask, impl=impl)  # type: ignore[arg-type]
    assert relative_error(result, expected) < 1e-5


def test_fused_and_math_paths_agree_in_fp32() -> None:
    query, key, value = (torch.randn(4, 6, 50, 32) for _ in range(3))
    fused = scaled_dot_product_attention(query, key, value, impl="sdpa")
    math_path = scaled_dot_product_attention(query, key, value, impl="math")
    assert relative_error(fused, math_path) < 1e-5


def test_unknown_impl_is_rejected() -> None:
    x = torch.randn(1, 2, 3)
    with pytest.raises(ValueError, match="flash"):
        scaled_dot_product_attention(x, x, x, impl="flash")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="flash"):
        MultiHeadAttention(8, 2, attention_impl="flash")  # type: ignore[arg-type]


def test_dot_product_attention_with_valid_lengths() -> None:
    attention = DotProductAttention(impl="math").eval()
    query, key, value = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    valid = torch.tensor([2, 4])
    weights = masked_softmax(query @ key.transpose(1, 2) / 2.0, valid)
    torch.testing.assert_close(attention(query, key, value, valid), weights @ value)


@pytest.mark.parametrize("impl", ["sdpa", "math"])
def test_multi_head_attention_matches_torch(impl: str) -> None:
    ours = MultiHeadAttention(16, 4, attention_impl=impl).eval()  # type: ignore[arg-type]
    reference = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():  # torch stacks q, k, v projections the same way: rows [q; k; v], head-major
        reference.in_proj_weight.copy_(ours.qkv.weight)
        reference.in_proj_bias.copy_(ours.qkv.bias)
        reference.out_proj.weight.copy_(ours.proj.weight)
        reference.out_proj.bias.copy_(ours.proj.bias)
    x = torch.randn(3, 9, 16)
    padding = torch.zeros(3, 9, dtype=torch.bool)
    padding[0, 6:] = True  # last keys of sample 0 are padding
    expected, _ = reference(x, x, x, key_padding_mask=padding, need_weights=False)
    result = ours(x, mask=~padding[:, None, None, :])
    assert relative_error(result, expected) < 1e-5


def test_sinusoidal_table_matches_formula() -> None:
    table = sinusoidal_table(12, 8)
    for pos in range(12):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(SinusoidalPositionalEmbedding(8, max_len=12)(x), x + table[:5])
    with pytest.raises(ValueError, match="even"):
        sinusoidal_table(4, 7)


def test_learned_positional_embedding_adds_a_trainable_row_per_position() -> None:
    embedding = LearnedPositionalEmbedding(8, max_len=10)
    x = torch.randn(2, 6, 8)
    out = embedding(x)
    torch.testing.assert_close(out - x, embedding.pos_embed[:, :6].expand(2, -1, -1))
    out.sum().backward()
    assert embedding.pos_embed.grad is not None
    assert (embedding.pos_embed.grad[:, :6] == 2).all()
    assert (embedding.pos_embed.grad[:, 6:] == 0).all()


def test_patch_embedding_is_a_linear_map_of_raster_ordered_patches() -> None:
    embed = PatchEmbed(img_size=12, patch_size=4, in_chans=3, embed_dim=5)
    clips = torch.randn(2, 3, 3, 12, 12)  # (B, T, C, H, W): leading dims are kept
    tokens = embed(clips)
    assert tokens.shape == (2, 3, 9, 5)
    weight = embed.proj.weight.flatten(1)  # (D, C*p*p)
    for row in range(3):
        for col in range(3):
            patch = clips[1, 2, :, 4 * row : 4 * row + 4, 4 * col : 4 * col + 4].flatten()  # (C*p*p,)
            expected = weight @ patch + embed.proj.bias
            torch.testing.assert_close(tokens[1, 2, 3 * row + col], expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="12x12"):
        embed(torch.randn(1, 3, 8, 8))


def test_tubelet_embedding_sums_patch_maps_over_its_frames() -> None:
    tubelets = TubeletEmbed(img_size=8, patch_size=4, tubelet_size=2, in_chans=3, embed_dim=6)
    frames = PatchEmbed(img_size=8, patch_size=4, in_chans=3, embed_dim=6)
    clips = torch.randn(2, 4, 3, 8, 8)  # (B, T, C, H, W)
    tokens = tubelets(clips)
    assert tokens.shape == (2, 2, 4, 6)
    expected = []
    for step in range(2):
        total = tubelets.proj.bias.clone()
        per_frame = []
        for offset in range(2):
            with torch.no_grad():
                frames.proj.weight.copy_(tubelets.proj.weight[:, :, offset])
                frames.proj.bias.zero_()
            per_frame.append(frames(clips[:, 2 * step + offset]))
        expected.append(per_frame[0] + per_frame[1] + total)
    torch.testing.assert_close(tokens, torch.stack(expected, dim=1), rtol=1e-5, atol=1e-5)


def test_transformer_block_is_pre_norm_attention_then_mlp() -> None:
    block = TransformerBlock(16, 4, mlp_ratio=2.0).eval()
    x = torch.randn(2, 5, 16)
    reference_attention = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        reference_attention.in_proj_weight.copy_(block.attn.qkv.weight)
        reference_attention.in_proj_bias.copy_(block.attn.qkv.bias)
        reference_attention.out_proj.weight.copy_(block.attn.proj.weight)
        reference_attention.out_proj.bias.copy_(block.attn.proj.bias)
    normed = nn.functional.layer_norm(x, (16,), block.norm1.weight, block.norm1.bias, eps=1e-6)
    hidden = x + reference_attention(normed, normed, normed, need_weights=False)[0]
    normed = nn.functional.layer_norm(hidden, (16,), block.norm2.weight, block.norm2.bias, eps=1e-6)
    mlp = block.mlp.fc2(nn.functional.gelu(block.mlp.fc1(normed)))
    assert relative_error(block(x), hidden + mlp) < 1e-5


def test_drop_path_drops_whole_samples_and_rescales_the_rest() -> None:
    drop = DropPath(0.5)
    x = torch.ones(4000, 3, 2)
    out = drop(x)
    per_sample = out.flatten(1)
    assert set(per_sample.unique().tolist()) == {0.0, 2.0}  # a sample is all dropped or all kept x 1/(1-p)
    assert (per_sample.min(1).values == per_sample.max(1).values).all()
    assert out.mean().item() == pytest.approx(1.0, abs=0.08)
    torch.testing.assert_close(drop.eval()(x), x)
    with pytest.raises(ValueError, match="drop_prob"):
        DropPath(1.0)


def test_resize_pos_embed_keeps_prefix_and_interpolates_grid() -> None:
    pos = torch.randn(1, 1 + 16, 6)
    torch.testing.assert_close(resize_pos_embed(pos, 4), pos)
    resized = resize_pos_embed(pos, 6)
    assert resized.shape == (1, 1 + 36, 6)
    torch.testing.assert_close(resized[:, :1], pos[:, :1])
    constant = torch.cat([torch.zeros(1, 1, 6), torch.full((1, 16, 6), 0.7)], dim=1)
    torch.testing.assert_close(resize_pos_embed(constant, 3)[:, 1:], torch.full((1, 9, 6), 0.7))
    with pytest.raises(ValueError, match="square"):
        resize_pos_embed(torch.randn(1, 1 + 15, 6), 4)
