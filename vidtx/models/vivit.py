"""ViViT model 2, the factorised encoder (Arnab et al., ICCV 2021).

A spatial ViT encodes every time step (tubelets of `tubelet_size` frames) on its own and gives one
class-token feature per step; a temporal transformer (own class token, learned 1-D positions) runs
over those T' features; its class token is classified.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from vidtx.models.heads import ClassifierHead
from vidtx.models.video import VideoTransformer
from vidtx.nn import TransformerBlock, drop_path_rates, run_blocks


class ViViTFactorisedEncoder(VideoTransformer):
    """Spatial encoder per time step, then `temporal_depth` temporal layers: clips -> logits.

    The temporal layers reuse the spatial encoder's width, heads, MLP ratio, norm eps and attention
    impl; their learned positions (1, 1 + T', D) are initialised with `pos_embed_std`.

    Args:
        tubelet_size: Frames per tubelet token (Conv3d embedding); the spatial encoder runs on each
            of the T' = num_frames / tubelet_size steps. 1: one frame per step.
        temporal_depth: Number of transformer blocks of the temporal encoder; its stochastic-depth
            rates rise from 0 to `drop_path_rate` like the spatial encoder's.
        **kwargs: Passed to `VideoTransformer` / `ViTEncoder` (num_classes, num_frames, depth (the
            spatial encoder's), embed_dim, drop_path_rate, ...).
    """

    def __init__(self, *, tubelet_size: int = 2, temporal_depth: int = 4, **kwargs: Any) -> None:
        super().__init__(tubelet_size=tubelet_size, **kwargs)
        dim = self.embed_dim
        self.temporal_cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.temporal_pos_embed = nn.Parameter(torch.zeros(1, 1 + self.token_frames, dim))
        self.temporal_blocks = nn.Sequential(
            *(
                TransformerBlock(
                    dim,
                    self.num_heads,
                    mlp_ratio=self.mlp_ratio,
                    drop_path=rate,
                    norm_eps=self.norm_eps,
                    attention_impl=self.attention_impl,
                )
                for rate in drop_path_rates(self.drop_path_rate, temporal_depth)
            )
        )
        self.temporal_norm = nn.LayerNorm(dim, eps=self.norm_eps)
        self.head = ClassifierHead(dim, self.num_classes, self.head_dropout)
        self.init_weights()
        nn.init.trunc_normal_(self.temporal_pos_embed, std=self.pos_embed_std)

    def forward_features(self, clips: Tensor) -> Tensor:
        """The temporal class-token feature: (B, D)."""
        steps = self.encode_frames(self.frame_sequences(clips))  # (B, T', D)
        token = self.temporal_cls_token.expand(steps.shape[0], -1, -1)  # (B, 1, D)
        z = torch.cat([token, steps], dim=1) + self.temporal_pos_embed  # (B, 1 + T', D)
        return self.temporal_norm(run_blocks(self.temporal_blocks, z, self.checkpoint_every))[:, 0]
