"""VideoMAE's ViT (Tong et al., NeurIPS 2022), the encoder of its released checkpoints: the joint
space-time ViT with what those checkpoints hold and vidtx's joint model lacks.

- Tubelet tokens: a Conv3d over 2 frames x 16 x 16 (`tubelet_size`), T' = T / 2 steps of N patches.
- Positions: a fixed sin-cos table over the flattened T'·N tokens (VideoMAE's
  `get_sinusoid_encoding_table`: sin on even channels, cos on odd), not in the state dict.
- No class token. Attention with query and value biases and no key bias (`q_bias`, `v_bias`).
- No final norm over the tokens: the clip's feature is the mean of its tokens through `fc_norm`, then
  the classifier.

`vidtx.models.videomae_weights` reads the official release's checkpoints and Hugging Face's
`VideoMAEModel` into it, so a fine-tune starts from them (`model.init_from` of a converted `.pt`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from vidtx.models.heads import ClassifierHead
from vidtx.models.video import VideoTransformer
from vidtx.models.vit import _weight_init_skipped
from vidtx.nn import MultiHeadAttention, TransformerBlock, sinusoidal_table


class QueryValueBiasAttention(MultiHeadAttention):
    """Multi-head attention whose projection has a query and a value bias and no key bias (BEiT's and
    VideoMAE's): the fused qkv has no bias of its own, `q_bias` and `v_bias` are added to its output."""

    def __init__(self, dim: int, num_heads: int, *, qkv_bias: bool = True, **kwargs: Any) -> None:
        super().__init__(dim, num_heads, qkv_bias=False, **kwargs)
        self.q_bias = nn.Parameter(torch.zeros(dim))
        self.v_bias = nn.Parameter(torch.zeros(dim))

    def transform_qkv(self, qkv: Tensor, tokens: int) -> Tensor:
        """qkv (B·S, 3·D) + (q_bias | 0 | v_bias)."""
        return qkv + torch.cat([self.q_bias, torch.zeros_like(self.q_bias), self.v_bias])


class VideoMAEViT(VideoTransformer):
    """VideoMAE's ViT: clips (B, C, T, H, W) -> logits (B, num_classes) (see the module docstring).

    Args:
        tubelet_size: Frames per token (VideoMAE: 2).
        **kwargs: Passed to `VideoTransformer` / `ViTEncoder` (num_classes, num_frames, img_size,
            patch_size, embed_dim, depth, num_heads, ...).
    """

    MASKINGS = ("tube", "random")

    def __init__(self, *, tubelet_size: int = 2, **kwargs: Any) -> None:
        super().__init__(
            tubelet_size=tubelet_size,
            block_cls=partial(TransformerBlock, attention_cls=QueryValueBiasAttention),
            **kwargs,
        )
        del self.cls_token, self.pos_embed  # no class token; fixed positions over all tokens
        tokens = self.token_frames * self.patch_embed.num_patches
        self.register_buffer("pos_table", sinusoidal_table(tokens, self.embed_dim)[None], persistent=False)
        self.norm = nn.Identity()  # the tokens' features are not normalised: their mean is
        self.fc_norm = nn.LayerNorm(self.embed_dim, eps=self.norm_eps)
        self.head = ClassifierHead(self.embed_dim, self.num_classes, self.head_dropout)
        self.init_weights()

    def init_weights(self) -> None:
        """timm's init of the linear weights (truncated normal, zero biases); nothing inside
        `no_weight_init()`."""
        if _weight_init_skipped.get():
            return
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=self.init_std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def tokens(self, clips: Tensor) -> Tensor:
        """Clips (B, C, T, H, W) -> tokens with their positions (B, T'·N, D)."""
        patches = self.patch_embed(clips.transpose(1, 2)).flatten(1, 2)  # (B, T'·N, D)
        return patches + self.pos_table.to(patches.dtype)

    def forward_token_features(self, clips: Tensor) -> Tensor:
        """Every token's final feature (B, T'·N, D): Hugging Face's `last_hidden_state`."""
        return self.encode(self.tokens(clips))

    def forward_features(self, clips: Tensor) -> Tensor:
        """The clip's feature: the mean of its tokens' features, normalised: (B, D)."""
        return self.fc_norm(self.forward_token_features(clips).mean(dim=1))

    def encode_visible(self, clips: Tensor, visible: Tensor) -> Tensor:
        """The final features of the visible tokens only, (B, K, D), for `visible` (B, K) indices."""
        tokens = self.tokens(clips)
        return self.encode(tokens.gather(1, visible[..., None].expand(-1, -1, tokens.shape[-1])))
