"""Which tokens of a clip a masked autoencoder hides (VideoMAE, Tong et al., NeurIPS 2022).

A clip of T' time steps of N patches has T'·N tokens, frame-major (token t·N + s is patch s of step t).
Tube masking hides the same N·ratio spatial positions at every time step: a hidden patch cannot be
copied from the frame before, which is what makes video reconstruction hard and its features
temporal; with it, every step keeps the same visible positions, so a model that mixes neighbouring
frames (X-ViT) sees the same positions in each. Random masking hides T'·N·ratio tokens anywhere.
Every clip of a batch hides as many tokens as the others (the encoder runs on a dense batch).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Masking = Literal["tube", "random"]
MASKINGS: tuple[str, ...] = ("tube", "random")


def visible_count(masking: Masking, steps: int, patches: int, ratio: float) -> int:
    """Tokens a clip keeps visible: per step (tube: the same positions) times steps, or in all."""
    if not 0.0 < ratio < 1.0:
        raise ValueError(f"mask ratio {ratio} must be between 0 and 1")
    kept = (
        round(patches * (1.0 - ratio)) * steps
        if masking == "tube"
        else round(steps * patches * (1.0 - ratio))
    )
    if kept < (steps if masking == "tube" else 1):
        raise ValueError(
            f"mask ratio {ratio} of {steps}x{patches} tokens ({masking} masking) leaves no visible token"
        )
    return kept


def sample_mask(
    batch: int,
    steps: int,
    patches: int,
    ratio: float,
    masking: Masking = "tube",
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> Tensor:
    """A mask per clip: bool (B, T'·N), True where a token is hidden; each clip hides as many."""
    kept = visible_count(masking, steps, patches, ratio)
    if masking == "tube":
        noise = torch.rand(batch, patches, generator=generator, device=device)  # (B, N)
        hidden = noise.argsort(dim=1)[:, kept // steps :]  # the positions hidden at every step
        spatial = torch.zeros(batch, patches, dtype=torch.bool, device=device).scatter_(1, hidden, True)
        return spatial[:, None, :].expand(-1, steps, -1).flatten(1)  # (B, T'·N)
    noise = torch.rand(batch, steps * patches, generator=generator, device=device)  # (B, T'·N)
    hidden = noise.argsort(dim=1)[:, kept:]
    return torch.zeros(batch, steps * patches, dtype=torch.bool, device=device).scatter_(1, hidden, True)


def visible_indices(mask: Tensor) -> Tensor:
    """The visible tokens of each clip, in order: (B, K) indices into T'·N, from a mask (B, T'·N)."""
    batch = mask.shape[0]
    return (~mask).nonzero(as_tuple=False)[:, 1].view(batch, -1)  # nonzero is row-major: sorted per row
