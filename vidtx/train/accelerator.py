"""Importing DeepSpeed with its accelerator chosen explicitly."""

from __future__ import annotations

import os
from types import ModuleType

import torch


def import_deepspeed() -> ModuleType:
    """DeepSpeed, with `DS_ACCELERATOR=cpu` when torch sees no GPU (unless the user set it).

    DeepSpeed picks its accelerator once, at import; left to detect it on a CPU machine it prints a
    warning to stdout, which would mix into command output.
    """
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    return deepspeed
