"""Multi-view evaluation of a trained model on a sharded split, in one process or over Ray workers.

Every video gives `num_clips x num_crops` views; the per-view logits are combined per video both by
summing logits and by averaging softmax probabilities, and both are reported (`eval.ensemble` picks
the primary one, which decides model promotion). A multi-label model's views are combined as the mean
and as the max of their sigmoids, scored by mAP and F1 (`vidtx.eval.multilabel`; `eval.view_aggregation`
picks the primary one).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import ray
import torch
from torch import nn

from vidtx.clips.views import view_logits
from vidtx.config import DataConfig, EvalConfig
from vidtx.data.eval_loader import build_eval_loader
from vidtx.eval.metrics import classification_metrics, combine_views, video_loss
from vidtx.eval.multilabel import AGGREGATIONS, multilabel_metrics, video_bce, view_probabilities
from vidtx.log import track
from vidtx.manifest import Manifest
from vidtx.ray_session import ray_session
from vidtx.results import EvalResult

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ViewLogits:
    """Per-view logits of the videos one worker evaluated."""

    logits: torch.Tensor  # (N, V, K)
    labels: torch.Tensor  # (N,), or label sets (N, K)
    keys: list[str]

    @staticmethod
    def concat(parts: list[ViewLogits]) -> ViewLogits:
        parts = [part for part in parts if part.keys]
        if not parts:
            return ViewLogits(torch.empty(0), torch.empty(0, dtype=torch.int64), [])
        keys = [key for part in parts for key in part.keys]
        return ViewLogits(torch.cat([p.logits for p in parts]), torch.cat([p.labels for p in parts]), keys)


@torch.no_grad()
def predict_split(
    model: nn.Module,
    data: DataConfig,
    split: str,
    *,
    num_clips: int,
    num_crops: int,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    expected_videos: int | None = None,
    class_names: Sequence[str] | None = None,
    multi_label: bool = False,
) -> ViewLogits:
    """Per-view logits for this rank's share of the split's shards, labels indexing `class_names` (the
    model's; default: the split's; with `multi_label`, label sets over them); with a progress bar over
    `expected_videos` when given."""
    model.eval()
    loader = build_eval_loader(
        data,
        split,
        batch_size=batch_size,
        num_clips=num_clips,
        num_crops=num_crops,
        rank=rank,
        world_size=world_size,
        class_names=class_names,
        multi_label=multi_label,
    )
    logits, labels, keys = [], [], []
    batches = (
        track(loader, f"evaluate {split}", total=-(-expected_videos // batch_size))
        if expected_videos
        else loader
    )
    for views, batch_labels, batch_keys in batches:  # uint8 views (B, V, T, H, W, C)
        batch, num_views = views.shape[:2]
        out = view_logits(model, data, views.flatten(0, 1))  # (B*V, T, H, W, C) -> (B*V, K)
        logits.append(out.view(batch, num_views, -1))
        labels.append(batch_labels)
        keys.extend(batch_keys)
    if not keys:
        return ViewLogits(torch.empty(0), torch.empty(0, dtype=torch.int64), [])
    return ViewLogits(torch.cat(logits), torch.cat(labels), keys)


# A task whose worker or node dies is run again, on a node that is alive (Ray's default, stated: the
# evaluation survives a lost node). The model it fetches again lives on: `evaluate` owns it, and its
# primary copy is in the object store of the driver's node.
@ray.remote(num_cpus=1, max_retries=3)
def _predict_remote(model: nn.Module, data: DataConfig, split: str, kwargs: dict[str, Any]) -> ViewLogits:
    """`predict_split` in a Ray task: pure, so a retried attempt gives the same logits."""
    return predict_split(model, data, split, **kwargs)


def evaluate(
    model: nn.Module,
    manifest: Manifest,
    data: DataConfig,
    eval_cfg: EvalConfig,
    class_names: Sequence[str] | None = None,
    multi_label: bool = False,
) -> EvalResult:
    """Evaluate `model`, whose logits are `class_names` (default: the split's classes; with
    `multi_label`, a sigmoid each), on the split `manifest` describes with the views of `eval_cfg`, in
    one process when `eval_cfg.num_workers == 1`, else over that many Ray tasks (shards split between
    them).

    `data` says how clips are made (frames, sampling, crop size, normalisation) and where the shards are.

    Over Ray, losing a node other than this process's own (its raylet, its machine) loses nothing: its
    task is run again on a node that is alive (up to 3 times), with the model from this process's
    object store, and every video still counts once. Losing this process's own node ends the
    evaluation (the model and the results are owned here), as it ends this process.
    """
    split = manifest.split
    class_names = list(class_names if class_names is not None else manifest.class_names)
    kwargs = {
        "num_clips": eval_cfg.num_clips,
        "num_crops": eval_cfg.num_crops,
        "batch_size": eval_cfg.batch_size,
        "class_names": class_names,
        "multi_label": multi_label,
    }
    if eval_cfg.num_workers == 1:
        outputs = predict_split(model, data, split, **kwargs, expected_videos=manifest.num_samples)
    else:
        with ray_session():
            model_ref, data = ray.put(model), data.with_absolute_paths()
            world = eval_cfg.num_workers
            futures = [
                _predict_remote.remote(model_ref, data, split, kwargs | {"rank": rank, "world_size": world})
                for rank in range(world)
            ]
            outputs = ViewLogits.concat(ray.get(futures))
    if not outputs.keys:
        raise RuntimeError(f"no video of split '{split}' in {data.shards} could be evaluated")
    logits, labels = outputs.logits, outputs.labels
    if multi_label:
        primary, loss = eval_cfg.view_aggregation, video_bce(logits, labels)
        by_ensemble = {
            how: multilabel_metrics(view_probabilities(logits, how), labels, eval_cfg.threshold)
            for how in AGGREGATIONS
        }
    else:
        primary, loss = eval_cfg.ensemble, video_loss(logits, labels)
        by_ensemble = {
            name: classification_metrics(score, labels) for name, score in combine_views(logits).items()
        }
    result = EvalResult(
        split=split,
        views=f"{eval_cfg.num_clips}x{eval_cfg.num_crops}",
        primary=primary,
        by_ensemble=by_ensemble,
        loss=loss,
        num_videos=len(outputs.keys),
        num_skipped=manifest.num_samples - len(outputs.keys),
        class_names=class_names,
        manifest_hash=manifest.content_hash,
    )
    headline = "mean_ap" if multi_label else "top1"
    logger.info(
        "%s: %s %.3f (%s), %d videos, %d skipped",
        split,
        headline,
        result.metrics()[headline],
        primary,
        result.num_videos,
        result.num_skipped,
    )
    return result
