"""VideoMAE's ViT (Tong et al., NeurIPS 2022), the encoder of its released checkpoints: the joint
space-time ViT with what those checkpoints hold and vidtx's joint model lacks.

- Tubelet tokens: a Conv3d over 2 frames x 16 x 16 (`tubelet_size`), T' = T / 2 steps of N patches.
- Positions: a fixed sin-cos table over the flattened T'·N tokens (VideoMAE's
  `get_sinusoid_encoding_table`: sin on even channels, cos on odd), not in the state dict.
- No class token. Attention with query and value biases and no key bias (`q_bias`, `v_bias`).
- Two layouts, as VideoMAE's two kinds of checkpoint (Hugging Face's `use_mean_pooling`):
  - fine-tuning (the default): no final norm over the tokens; the clip's feature is the mean of its
    tokens through `fc_norm`, then the classifier;
  - pretraining (`final_norm=True`): the encoder's tokens end in a norm (`norm`, what the decoder of
    VideoMAE's pretraining reads), no `fc_norm`; the clip's feature is the mean of its tokens, or the
    first token (`pooling="first"`: what Hugging Face's classifier without mean pooling takes).
  A fine-tune from a pretraining checkpoint follows VideoMAE's own recipe: the final norm is not
  used, the mean pooling goes through a new `fc_norm` (`FINE_TUNING_FRESH`).

`vidtx.models.videomae_checkpoints` reads the official release's checkpoints and Hugging Face's
(`model.init_from` names the file or folder itself).
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar, Literal

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


Pooling = Literal["mean", "first"]


class VideoMAEViT(VideoTransformer):
    """VideoMAE's ViT: clips (B, C, T, H, W) -> logits (B, num_classes) (see the module docstring).

    Args:
        tubelet_size: Frames per token (VideoMAE: 2).
        final_norm: The tokens end in a norm and the mean pooling has none (VideoMAE's pretraining
            encoder); False: no final norm, the mean goes through `fc_norm` (its fine-tuned models).
        pooling: The clip's feature: the mean of its tokens, or ("first", with `final_norm` only) the
            first token's feature, as Hugging Face's classifier without mean pooling.
        **kwargs: Passed to `VideoTransformer` / `ViTEncoder` (num_classes, num_frames, img_size,
            patch_size, embed_dim, depth, num_heads, ...).
    """

    MASKINGS = ("tube", "random")
    PRETRAINING_OPTIONS: ClassVar[dict[str, Any]] = {"final_norm": True}
    FINE_TUNING_FRESH = ("head.", "fc_norm.")
    FINE_TUNING_RECIPE = "VideoMAE's fine-tuning recipe, mean pooling into a new fc_norm"

    def __init__(
        self, *, tubelet_size: int = 2, final_norm: bool = False, pooling: Pooling = "mean", **kwargs: Any
    ) -> None:
        if pooling not in ("mean", "first") or (pooling == "first" and not final_norm):
            raise ValueError(f"pooling {pooling!r}: 'mean', or 'first' with final_norm")
        super().__init__(
            tubelet_size=tubelet_size,
            block_cls=partial(TransformerBlock, attention_cls=QueryValueBiasAttention),
            **kwargs,
        )
        del self.cls_token, self.pos_embed  # no class token; fixed positions over all tokens
        tokens = self.token_frames * self.patch_embed.num_patches
        self.register_buffer("pos_table", sinusoidal_table(tokens, self.embed_dim)[None], persistent=False)
        self.pooling = pooling
        if not final_norm:  # the tokens' features are not normalised: their mean is
            self.norm, self.fc_norm = nn.Identity(), nn.LayerNorm(self.embed_dim, eps=self.norm_eps)
        else:
            self.fc_norm = nn.Identity()
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
        """The clip's feature (B, D): the mean of its tokens' features through `fc_norm`, or the first
        token's (`pooling`)."""
        tokens = self.forward_token_features(clips)  # (B, T'·N, D)
        return self.fc_norm(tokens[:, 0] if self.pooling == "first" else tokens.mean(dim=1))

    def encode_visible(self, clips: Tensor, visible: Tensor) -> Tensor:
        """The final features of the visible tokens only, (B, K, D), for `visible` (B, K) indices."""
        tokens = self.tokens(clips)
        return self.encode(tokens.gather(1, visible[..., None].expand(-1, -1, tokens.shape[-1])))
