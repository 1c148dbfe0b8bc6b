"""An exponential moving average of the trained weights (`train.ema`), as VideoMAE's `--model_ema`
and timm's ModelEmaV2 keep it: after every optimizer step, ema = decay * ema + (1 - decay) * weight.

The average is kept in fp32 on every rank from the module's own parameters, which ZeRO stages 0-2
leave whole on each rank (ZeRO-3 partitions them: the schema refuses EMA with it). It is saved beside
each checkpoint's shards (`ema.pt`, rank 0's copy: every rank holds the same) and loaded back on
resume, and `swapped_in` puts it into the module for a validation pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

EMA_FILE = "ema.pt"  # beside the DeepSpeed shards of a checkpoint: {parameter name: fp32 tensor}


class WeightAverage:
    """The EMA of `module`'s trainable parameters (frozen ones never change, so their average is
    themselves)."""

    def __init__(self, module: nn.Module, decay: float) -> None:
        self.decay = decay
        self.params = {name: param for name, param in module.named_parameters() if param.requires_grad}
        self.shadow = {name: param.detach().float().clone() for name, param in self.params.items()}

    @torch.no_grad()
    def update(self) -> None:
        """One step of the average, after an optimizer step."""
        for name, param in self.params.items():
            self.shadow[name].lerp_(param.detach().float(), 1.0 - self.decay)

    def save(self, directory: str | Path) -> None:
        torch.save(self.shadow, Path(directory, EMA_FILE))

    def load(self, directory: str | Path) -> None:
        """The average saved in a checkpoint `directory` (a resumed run continues it exactly)."""
        saved = load_average(directory)
        if saved is None:
            raise FileNotFoundError(
                f"{directory} holds no {EMA_FILE}: the run was not started with train.ema"
            )
        if saved.keys() != self.shadow.keys():
            raise ValueError(f"{directory}/{EMA_FILE} averages other parameters than this model trains")
        self.shadow = saved

    @contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The average in the module's parameters for the duration (e.g. a validation pass)."""
        with torch.no_grad():
            raw = {name: param.detach().clone() for name, param in self.params.items()}
            for name, param in self.params.items():
                param.copy_(self.shadow[name])
        try:
            yield
        finally:
            with torch.no_grad():
                for name, param in self.params.items():
                    param.copy_(raw[name])


def load_average(directory: str | Path) -> dict[str, torch.Tensor] | None:
    """The EMA weights saved in a checkpoint directory, if it has them."""
    path = Path(directory, EMA_FILE)
    return torch.load(path, map_location="cpu", weights_only=True) if path.is_file() else None
