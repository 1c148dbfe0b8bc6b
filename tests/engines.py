"""Real DeepSpeed engines in the test's own process (one rank over gloo, DeepSpeed's CPU accelerator),
built as the training loop builds them (`vidtx.train.engine`), for what a behaviour of the engine needs no Ray for
(ZeRO stages, precision, activation checkpointing, ...); with the `single_process_group` fixture.

Imported as `from engines import ...` (tests/ is on sys.path under pytest, see media.py).
"""

from __future__ import annotations

from pathlib import Path

import torch

from vidtx.config import TrainConfig
from vidtx.models import create_model
from vidtx.train.checkpoint import TAG, consolidated_state_dict
from vidtx.train.engine import build_engine


def trained_weights(
    preset: str, train: TrainConfig, steps: int, workdir: Path, same_batch: bool = False
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """`steps` optimizer steps of `preset` on the engine the training loop builds for `train` (fixed
    random clips, labels 0/1; with `same_batch` one batch every step): the losses and the consolidated
    fp32 weights after them."""
    torch.manual_seed(train.seed)
    model = create_model(preset)
    engine = build_engine(model, train).engine
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[train.precision]
    generator = torch.Generator().manual_seed(1)
    losses = []
    for step in range(steps):
        if step == 0 or not same_batch:
            clips = torch.randn(train.micro_batch_size, 3, model.num_frames, model.img_size, model.img_size,
                                generator=generator)  # fmt: skip
        labels = torch.arange(train.micro_batch_size) % 2
        loss = torch.nn.functional.cross_entropy(engine(clips.to(dtype)).float(), labels)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    engine.save_checkpoint(str(workdir), tag=TAG)
    return losses, consolidated_state_dict(workdir, create_model(preset))
