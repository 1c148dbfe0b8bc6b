"""The ViT trunk shared by every model in the zoo, and the image ViT built on it.

Parameter names follow timm's `VisionTransformer` (`patch_embed.proj`, `cls_token`, `pos_embed`,
`blocks.<i>.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}`, `norm`, `head`), so an image-ViT
state dict loads into any video model by name (see `vidtx.models.weights`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from vidtx.nn import AttentionImpl, PatchEmbed, TransformerBlock, TubeletEmbed, drop_path_rates, run_blocks

_weight_init_skipped = contextvars.ContextVar("weight_init_skipped", default=False)


@contextlib.contextmanager
def no_weight_init() -> Iterator[None]:
    """Models built inside leave their weights as created (as Hugging Face's `no_init_weights`): for a
    network on the meta device, of which only names and shapes are used. A random init of a meta
    tensor computes nothing, but its first one imports torch._dynamo: about 1.3 s of each CLI start."""
    token = _weight_init_skipped.set(True)
    try:
        yield
    finally:
        _weight_init_skipped.reset(token)


class ViTEncoder(nn.Module):
    """Patch (or tubelet) tokens, a class token, learned spatial positions, pre-norm blocks, final norm.

    The video models pass blocks with their own attention through `block_cls`. Subclasses call
    `init_weights()` once all their modules exist; the init stds take effect only then.

    timm's init std 0.02 suits ViT-B widths and pretrained starts; narrow models trained from scratch
    need larger ones (the tiny presets: 0.1 and 1.0). With 0.02 at width 64-96 the positions are a few
    per cent of the patch content and the blocks pass little signal, and the tiny models stayed at
    chance for 800 steps on a square moving left or right; with the tiny presets' values they learn it.

    Args:
        img_size: Input height and width in pixels (square inputs only); a multiple of `patch_size`.
        patch_size: Side of the square, non-overlapping patches in pixels.
        in_chans: Input channels (3 for RGB).
        embed_dim: Token width D.
        depth: Number of transformer blocks.
        num_heads: Attention heads per block; must divide `embed_dim`.
        mlp_ratio: MLP hidden width as a multiple of `embed_dim`.
        qkv_bias: Add a bias to the fused qkv projection.
        drop_path_rate: Stochastic-depth rate of the last block; rates rise linearly from 0 at the
            first block (0 = off).
        norm_eps: Epsilon of every LayerNorm (timm's 1e-6).
        attention_impl: "auto" / "sdpa": torch's fused `F.scaled_dot_product_attention`; "math": the
            explicit softmax(QKᵀ/√d)V.
        tubelet_size: Frames per token. 1: each frame is embedded on its own (Conv2d `PatchEmbed`);
            > 1: a Conv3d over `tubelet_size` frames (`TubeletEmbed`), so time shrinks to T / tubelet.
        init_std: Std of the truncated-normal init of every `nn.Linear` weight (biases start at zero).
        pos_embed_std: Std of the truncated-normal init of the learned positions `pos_embed`.
        block_cls: Builds each block, called like `TransformerBlock(embed_dim, num_heads, mlp_ratio=,
            qkv_bias=, drop_path=, norm_eps=, attention_impl=)`.
    """

    def __init__(
        self,
        *,
        img_size: int = 224,
        patch_size: int = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_path_rate: float = 0.0,
        norm_eps: float = 1e-6,
        attention_impl: AttentionImpl = "auto",
        tubelet_size: int = 1,
        init_std: float = 0.02,
        pos_embed_std: float = 0.02,
        block_cls: Callable[..., nn.Module] = TransformerBlock,
    ) -> None:
        super().__init__()
        self.img_size = img_size
        self.patch_size = patch_size
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.mlp_ratio = mlp_ratio
        self.drop_path_rate = drop_path_rate
        self.norm_eps = norm_eps
        self.attention_impl = attention_impl
        self.tubelet_size = tubelet_size
        self.init_std = init_std
        self.pos_embed_std = pos_embed_std
        self.patch_embed: PatchEmbed | TubeletEmbed = (
            PatchEmbed(img_size, patch_size, in_chans, embed_dim)
            if tubelet_size == 1
            else TubeletEmbed(img_size, patch_size, tubelet_size, in_chans, embed_dim)
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + self.patch_embed.num_patches, embed_dim))
        self.blocks = nn.Sequential(
            *(
                block_cls(
                    embed_dim,
                    num_heads,
                    mlp_ratio=mlp_ratio,
                    qkv_bias=qkv_bias,
                    drop_path=rate,
                    norm_eps=norm_eps,
                    attention_impl=attention_impl,
                )
                for rate in drop_path_rates(drop_path_rate, depth)
            )
        )
        self.norm = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.checkpoint_every = 0  # activation checkpointing of the blocks (`set_activation_checkpointing`)

    def set_activation_checkpointing(self, every: int) -> None:
        """Keep only the inputs of blocks 0, k, 2k, ... (k = `every`; 1: every block; 0: off) in
        training and recompute their activations in the backward pass: memory for a block's forward.
        Every stack of blocks the model runs takes it (a video model's temporal encoder too)."""
        if every < 0:
            raise ValueError(f"activation checkpointing every {every} blocks: must be >= 0")
        self.checkpoint_every = every

    def init_weights(self) -> None:
        """timm's ViT init: truncated normal for linear weights (`init_std`) and positions
        (`pos_embed_std`), zero biases, a near-zero class token; then `zero_init_last()` of any block
        that has one. Other tokens and temporal embeddings keep the zeros they were created with.
        Nothing inside `no_weight_init()`."""
        if _weight_init_skipped.get():
            return
        nn.init.trunc_normal_(self.pos_embed, std=self.pos_embed_std)
        nn.init.normal_(self.cls_token, std=1e-6)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=self.init_std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for module in self.modules():
            if hasattr(module, "zero_init_last"):
                module.zero_init_last()

    def no_weight_decay(self) -> set[str]:
        """Names of the position/temporal embeddings and learned tokens (timm convention)."""
        return {name for name, _ in self.named_parameters() if name.endswith(("_embed", "_token"))}

    def class_token(self) -> Tensor:
        """The class token with its position: (1, 1, D)."""
        return self.cls_token + self.pos_embed[:, :1]

    def patch_tokens(self, clips: Tensor) -> Tensor:
        """Clips (B, C, T, H, W) -> patch tokens with spatial positions (B, T', N, D), T' = T / tubelet."""
        return self.patch_embed(clips.transpose(1, 2)) + self.pos_embed[:, None, 1:]

    def frame_sequences(self, clips: Tensor) -> Tensor:
        """Clips (B, C, T, H, W) -> one sequence per frame, class token first: (B, T', 1 + N, D)."""
        patches = self.patch_tokens(clips)  # (B, T', N, D)
        cls = self.class_token()[:, None].expand(*patches.shape[:2], -1, -1)  # (B, T', 1, D)
        return torch.cat([cls, patches], dim=2)

    def encode(self, tokens: Tensor) -> Tensor:
        """Blocks and final norm over sequences (B, S, D) -> (B, S, D)."""
        return self.norm(run_blocks(self.blocks, tokens, self.checkpoint_every))

    def encode_frames(self, sequences: Tensor) -> Tensor:
        """Encode each frame's sequence (B, T, S, D) independently; its class-token feature: (B, T, D)."""
        return self.encode(sequences.flatten(0, 1))[:, 0].unflatten(0, sequences.shape[:2])


class VisionTransformer(ViTEncoder):
    """Image ViT (Dosovitskiy et al.): images (B, C, H, W) -> logits (B, num_classes).

    Args:
        num_classes: Number of output logits K.
        head_dropout: Dropout rate on the class-token feature before the linear head (0 = off).
        **encoder_kwargs: Passed to `ViTEncoder` (img_size, patch_size, embed_dim, depth, ...).
    """

    def __init__(self, *, num_classes: int = 1000, head_dropout: float = 0.0, **encoder_kwargs: Any) -> None:
        super().__init__(**encoder_kwargs)
        self.num_classes = num_classes
        self.head_drop = nn.Dropout(head_dropout)
        self.head = nn.Linear(self.embed_dim, num_classes)
        self.init_weights()

    def forward_features(self, images: Tensor) -> Tensor:
        """The final class-token feature: (B, C, H, W) -> (B, D)."""
        return self.encode_frames(self.frame_sequences(images[:, :, None]))[:, 0]

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.head_drop(self.forward_features(images)))
