"""A training worker's DeepSpeed engine: the model made ready (activation checkpointing, frozen
parameters), its optimizer and schedule, DeepSpeed's engine around them, and torch.compile of it.

The training loop builds its engine here, and so do the tests of what an engine does without Ray
(ZeRO stages, precisions, checkpointing, compilation, freezing), so both build the same thing.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from vidtx.config import TrainConfig
from vidtx.models import VideoTransformer
from vidtx.train.accelerator import import_deepspeed
from vidtx.train.checkpoint import group_names
from vidtx.train.compilation import compile_engine
from vidtx.train.deepspeed_config import build_deepspeed_config
from vidtx.train.optim import build_optimizer, build_scheduler, group_table

TRUNK = "trunk"  # `train.freeze`'s word for every parameter but the head's


def is_frozen(name: str, patterns: Sequence[str]) -> bool:
    """Whether `train.freeze`'s `patterns` freeze the parameter `name`."""
    return any(
        not name.startswith("head.") if pattern == TRUNK else fnmatch.fnmatchcase(name, pattern)
        for pattern in patterns
    )


def unmatched_patterns(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """The patterns of `train.freeze` that freeze no parameter of `model`."""
    names = [name for name, _ in model.named_parameters()]
    return [pattern for pattern in patterns if not any(is_frozen(name, [pattern]) for name in names)]


@dataclass(frozen=True)
class BuiltEngine:
    engine: Any  # deepspeed.DeepSpeedEngine
    group_names: list[list[str]]  # each optimizer group's parameter names (saved with checkpoints)
    groups_table: str  # the groups' learning rates, weight decay and parameters, and what is frozen


def build_engine(model: VideoTransformer, train: TrainConfig) -> BuiltEngine:
    """The DeepSpeed engine that trains `model` as `train` says (on this process's torch.distributed
    group, which DeepSpeed starts from RANK / WORLD_SIZE when there is none)."""
    deepspeed = import_deepspeed()
    model.set_activation_checkpointing(train.activation_checkpointing)
    for name, param in model.named_parameters():
        if is_frozen(name, train.freeze):
            param.requires_grad_(False)  # out of the optimizer, untouched by the steps
    optimizer = build_optimizer(model, train.optimizer)
    names = group_names(model, optimizer.param_groups)  # before DeepSpeed wraps the optimizer
    table = group_table(optimizer, model)
    scheduler = build_scheduler(optimizer, train.schedule, train.max_steps)
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=build_deepspeed_config(train)
    )
    if train.compile.enabled:
        compile_engine(engine, train.compile)
    return BuiltEngine(engine, names, table)
