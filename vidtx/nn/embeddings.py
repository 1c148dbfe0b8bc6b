"""Token embeddings: image patches, video tubelets, sinusoidal and learned positions."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _check_size(height: int, width: int, img_size: int) -> None:
    if (height, width) != (img_size, img_size):
        raise ValueError(f"expected {img_size}x{img_size} frames, got {height}x{width}")


class PatchEmbed(nn.Module):
    """Non-overlapping patches to tokens: a Conv2d with kernel = stride = patch size.

    Any leading dims are kept: (*, C, H, W) -> (*, N, D), N = (H / patch) * (W / patch), so a clip laid
    out as (B, T, C, H, W) becomes (B, T, N, D).
    """

    def __init__(self, img_size: int, patch_size: int, in_chans: int, embed_dim: int) -> None:
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
        self.img_size = img_size
        self.grid_size = img_size // patch_size
        self.num_patches = self.grid_size**2
        self.frames_per_token = 1
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: Tensor) -> Tensor:
        *lead, channels, height, width = images.shape
        _check_size(height, width, self.img_size)
        tokens = self.proj(images.reshape(-1, channels, height, width))  # (prod(*), D, h, w)
        return tokens.flatten(2).transpose(1, 2).reshape(*lead, self.num_patches, -1)  # (*, N, D)


class TubeletEmbed(nn.Module):
    """Space-time tubelets to tokens (ViViT): a Conv3d with kernel = stride = (tubelet, patch, patch).

    (B, T, C, H, W) -> (B, T / tubelet, N, D).
    """

    def __init__(
        self, img_size: int, patch_size: int, tubelet_size: int, in_chans: int, embed_dim: int
    ) -> None:
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
        self.img_size = img_size
        self.grid_size = img_size // patch_size
        self.num_patches = self.grid_size**2
        self.frames_per_token = tubelet_size
        kernel = (tubelet_size, patch_size, patch_size)
        self.proj = nn.Conv3d(in_chans, embed_dim, kernel_size=kernel, stride=kernel)

    def forward(self, clips: Tensor) -> Tensor:
        _, frames, _, height, width = clips.shape
        _check_size(height, width, self.img_size)
        if frames % self.frames_per_token:
            raise ValueError(
                f"{frames} frames are not a multiple of the tubelet size {self.frames_per_token}"
            )
        tokens = self.proj(clips.transpose(1, 2))  # (B, D, T', h, w)
        return tokens.flatten(3).permute(0, 2, 3, 1)  # (B, T', N, D)


def sinusoidal_table(length: int, dim: int, base: float = 10000.0) -> Tensor:
    """P[pos, 2i] = sin(pos / base^(2i/dim)), P[pos, 2i+1] = cos(pos / base^(2i/dim)); (length, dim)."""
    if dim % 2:
        raise ValueError(f"sinusoidal embeddings need an even dim, got {dim}")
    positions = torch.arange(length, dtype=torch.float32)[:, None]  # (L, 1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(base) / dim))  # (dim/2,)
    angles = positions * inv_freq  # (L, dim/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # (L, dim), sin/cos interleaved


class SinusoidalPositionalEmbedding(nn.Module):
    """Adds fixed sinusoidal positions to a sequence (B, L, D); L <= max_len. No parameters."""

    def __init__(self, dim: int, max_len: int = 1024, dropout: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_table(max_len, dim), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(x + self.table[: x.shape[1]].to(x.dtype))


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned position vector per index to a sequence (B, L, D); L <= max_len."""

    def __init__(self, dim: int, max_len: int, dropout: float = 0.0, init_std: float = 0.02) -> None:
        super().__init__()
        self.pos_embed = nn.Parameter(torch.zeros(1, max_len, dim))
        nn.init.trunc_normal_(self.pos_embed, std=init_std)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(x + self.pos_embed[:, : x.shape[1]])


def resize_pos_embed(pos_embed: Tensor, grid_size: int, num_prefix_tokens: int = 1) -> Tensor:
    """Bicubically resize a square grid of position vectors (1, prefix + n², D) to (1, prefix + g², D).

    Prefix tokens (the class token's position) are kept as they are.
    """
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    old_size = math.isqrt(grid.shape[1])
    if old_size**2 != grid.shape[1]:
        raise ValueError(f"{grid.shape[1]} position vectors do not form a square grid")
    if old_size == grid_size:
        return pos_embed
    image = grid.reshape(1, old_size, old_size, -1).permute(0, 3, 1, 2).float()  # (1, D, n, n)
    image = F.interpolate(image, size=(grid_size, grid_size), mode="bicubic", align_corners=False)
    grid = image.permute(0, 2, 3, 1).flatten(1, 2).to(pos_embed.dtype)  # (1, g², D)
    return torch.cat([prefix, grid], dim=1)
