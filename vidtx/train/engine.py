"""A training worker's DeepSpeed engine: the model made ready (activation checkpointing), its
optimizer and schedule, DeepSpeed's engine around them, and torch.compile of it.

The training loop builds its engine here, and so do the tests of what an engine does without Ray
(ZeRO stages, precisions, checkpointing, compilation), so both build the same thing.
"""

from __future__ import annotations

from typing import Any

from vidtx.config import TrainConfig
from vidtx.models import VideoTransformer
from vidtx.train.accelerator import import_deepspeed
from vidtx.train.compilation import compile_engine
from vidtx.train.deepspeed_config import build_deepspeed_config
from vidtx.train.optim import build_optimizer, build_scheduler


def build_engine(model: VideoTransformer, train: TrainConfig) -> Any:
    """The DeepSpeed engine that trains `model` as `train` says (on this process's torch.distributed
    group, which DeepSpeed starts from RANK / WORLD_SIZE when there is none)."""
    deepspeed = import_deepspeed()
    model.set_activation_checkpointing(train.activation_checkpointing)
    optimizer = build_optimizer(model, train.optimizer)
    scheduler = build_scheduler(optimizer, train.schedule, train.max_steps)
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=build_deepspeed_config(train)
    )
    if train.compile.enabled:
        compile_engine(engine, train.compile)
    return engine
