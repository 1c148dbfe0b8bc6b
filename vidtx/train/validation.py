"""The validation pass of a training run, centre view, over every rank's share of the validation split:
top-1, top-5 and loss for a classifier; mAP and loss for a multi-label one."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from vidtx.config import DataConfig
from vidtx.data.eval_loader import build_eval_loader
from vidtx.eval.metrics import top_k_correct
from vidtx.eval.multilabel import mean_average_precision

ToModel = Callable[[torch.Tensor], torch.Tensor]


def _validation_logits(
    engine: Any,
    data: DataConfig,
    batch_size: int,
    max_batches: int | None,
    to_model: ToModel,
    class_names: Sequence[str],
    multi_label: bool,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(logits (B, K) fp32 on the CPU, labels (B,) or label sets (B, K)) of this rank's batches, the
    engine in eval mode meanwhile.

    Ranks hold different numbers of clips; they agree each iteration whether anyone still has a
    batch and run a throw-away forward when they do not, so ZeRO-3's gathers stay in lock-step.
    """
    loader = iter(
        build_eval_loader(
            data, data.val_split, batch_size=batch_size, class_names=class_names, multi_label=multi_label
        )
    )
    engine.eval()
    try:
        for _ in range(max_batches or 10**12):
            batch = next(loader, None)
            active = torch.tensor([batch is not None], dtype=torch.int64)
            dist.all_reduce(active)
            if not active.item():
                break
            if batch is None:
                blank = torch.zeros(
                    (1, data.num_frames, data.crop_size, data.crop_size, 3), dtype=torch.uint8
                )
                engine(to_model(blank))
                continue
            views, labels, _ = batch  # uint8 (B, 1, T, H, W, C)
            yield engine(to_model(views[:, 0])).float().cpu(), labels
    finally:
        engine.train()


@torch.no_grad()
def validate(
    engine: Any,
    data: DataConfig,
    batch_size: int,
    max_batches: int | None,
    to_model: ToModel,
    class_names: Sequence[str],
    multi_label: bool = False,
) -> dict[str, float]:
    """The validation of the engine's current weights, whose logits are `class_names`: `top1`, `top5`,
    `loss` and `clips`; with `multi_label`, `mean_ap`, `loss` (binary cross entropy) and `clips`.
    `to_model` turns the loader's uint8 clips (B, T, H, W, C) into the model's input."""
    batches = _validation_logits(engine, data, batch_size, max_batches, to_model, class_names, multi_label)
    return _label_set_results(batches) if multi_label else _classification_results(batches)


def _classification_results(batches: Iterator[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    totals = torch.zeros(4, dtype=torch.float64)  # correct@1, correct@5, loss sum, clips
    for logits, labels in batches:
        loss_sum = F.cross_entropy(logits, labels, reduction="sum").item()
        totals += torch.tensor([*top_k_correct(logits, labels), loss_sum, len(labels)], dtype=torch.float64)
    dist.all_reduce(totals)
    correct1, correct5, loss_sum, clips = totals.tolist()
    clips = max(clips, 1.0)
    return {"top1": correct1 / clips, "top5": correct5 / clips, "loss": loss_sum / clips, "clips": clips}


def _label_set_results(batches: Iterator[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    """Average precision ranks every clip of the split against every other, so the ranks' logits are
    gathered (a validation split's are a few MB) and each rank scores the whole."""
    parts = list(batches)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, parts)
    pairs = [pair for rank in gathered for pair in rank]
    if not pairs:
        return {"mean_ap": float("nan"), "loss": float("nan"), "clips": 0.0}
    logits = torch.cat([logits for logits, _ in pairs])  # (N, K)
    targets = torch.cat([targets for _, targets in pairs])  # (N, K) in {0, 1}
    loss = F.binary_cross_entropy_with_logits(logits, targets).item()
    mean_ap = mean_average_precision(torch.sigmoid(logits), targets)
    return {"mean_ap": mean_ap, "loss": loss, "clips": float(len(targets))}
