"""The one normalisation: uint8 clips in the decoders' layout to the model's float input, on the device
(training's step, evaluation and the served model all call it)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def normalize_clips(
    clips: torch.Tensor, mean: Sequence[float], std: Sequence[float], dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """uint8 clips (..., T, H, W, C) -> (..., C, T, H, W) in `dtype`, (x / 255 - mean) / std, computed
    in float32 on the clips' device (move them to the model's device first)."""
    scale = torch.tensor([1.0 / (255.0 * s) for s in std], device=clips.device)
    shift = torch.tensor([m / s for m, s in zip(mean, std, strict=True)], device=clips.device)
    normalised = clips.to(torch.float32).mul_(scale).sub_(shift)  # (..., T, H, W, C)
    return normalised.movedim(-1, -4).to(dtype).contiguous()  # (..., C, T, H, W)
