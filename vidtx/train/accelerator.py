"""Importing DeepSpeed with its accelerator chosen explicitly, ready to start an engine."""

from __future__ import annotations

import os
from types import ModuleType

import torch

from vidtx.train.op_builds import settle_build_locks, skip_unused_ops


def import_deepspeed() -> ModuleType:
    """DeepSpeed, with `DS_ACCELERATOR=cpu` when torch sees no GPU (unless the user set it), told not
    to build the ops training does not call, after any build lock an interrupted build left behind is
    cleared (`vidtx.train.op_builds`).

    DeepSpeed picks its accelerator once, at import; left to detect it on a CPU machine it prints a
    warning to stdout, which would mix into command output.
    """
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    skip_unused_ops(deepspeed)
    settle_build_locks()
    return deepspeed
