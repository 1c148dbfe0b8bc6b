"""The validation pass of a training run: top-1, top-5 and loss on the validation split, centre view,
summed over ranks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from vidtx.config import DataConfig
from vidtx.data.eval_loader import build_eval_loader
from vidtx.eval.metrics import top_k_correct


@torch.no_grad()
def validate(
    engine: Any,
    data: DataConfig,
    batch_size: int,
    max_batches: int | None,
    to_model: Callable[[torch.Tensor], torch.Tensor],
    class_names: Sequence[str],
) -> dict[str, float]:
    """`top1`, `top5`, `loss` and `clips` of the engine's current weights, whose logits are
    `class_names`; `to_model` turns the loader's uint8 clips (B, T, H, W, C) into the model's input.

    Ranks hold different numbers of clips; they agree each iteration whether anyone still has a
    batch and run a throw-away forward when they do not, so ZeRO-3's gathers stay in lock-step.
    """
    loader = iter(build_eval_loader(data, data.val_split, batch_size=batch_size, class_names=class_names))
    totals = torch.zeros(4, dtype=torch.float64)  # correct@1, correct@5, loss sum, clips
    engine.eval()
    for _ in range(max_batches or 10**12):
        batch = next(loader, None)
        active = torch.tensor([batch is not None], dtype=torch.int64)
        dist.all_reduce(active)
        if not active.item():
            break
        if batch is None:
            engine(
                to_model(
                    torch.zeros((1, data.num_frames, data.crop_size, data.crop_size, 3), dtype=torch.uint8)
                )
            )
            continue
        views, labels, _ = batch  # uint8 (B, 1, T, H, W, C)
        logits = engine(to_model(views[:, 0])).float().cpu()
        loss_sum = torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
        totals += torch.tensor([*top_k_correct(logits, labels), loss_sum, len(labels)], dtype=torch.float64)
    engine.train()
    dist.all_reduce(totals)
    correct1, correct5, loss_sum, clips = totals.tolist()
    clips = max(clips, 1.0)
    return {"top1": correct1 / clips, "top5": correct5 / clips, "loss": loss_sum / clips, "clips": clips}
