"""Shards to evaluation batches (the train loader: `vidtx.data.train_loader`; what both share:
`vidtx.data.web_loader`).

Evaluation: the manifest's shards in order, split by rank (whole shards, and the ones left over by
sample: `vidtx.data.shares`) and by DataLoader worker, not resampled, so all ranks together see every
sample once and each rank of a split with at least as many samples as ranks has a share.

Clips leave the loaders as uint8 in the decoders' layout (T, H, W, C) (pinned when CUDA is there);
`vidtx.data.transforms.normalize_clips` makes them the model's float (B, C, T, H, W) on the device.
Both stores of `vidtx.manifest` are read (`vidtx.data.samples`): a video member decoded with decord
(PyAV as the fallback) at the size the crop needs, or packed JPEG frames of which only the sampled
ones are decoded.

A sample that fails to decode is logged and skipped, and so is whatever part of a tar cannot be read
(a truncated or missing shard): a damaged shard costs its unreadable samples, never the run.
Decoders are created per sample inside the worker; workers start with `forkserver` so they inherit
no decoder or thread state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from typing import Any

import torch
import webdataset as wds

from vidtx.cache import shard_cache
from vidtx.clips.views import test_views
from vidtx.config import DataConfig
from vidtx.data.labels import label_target, stacked_labels
from vidtx.data.samples import SAMPLE_ERRORS, open_sample, sample_name
from vidtx.data.shares import EvalSamples
from vidtx.data.training_data import relabelled
from vidtx.data.web_loader import log_and_continue, web_loader
from vidtx.manifest import load_manifest

log = logging.getLogger(__name__)


# views uint8 (B, V, T, H, W, C); labels int64 (B,), or with multi_label float32 multi-hot (B, K); keys
EvalBatch = tuple[torch.Tensor, torch.Tensor, list[str]]


def _eval_views(
    samples: Iterable[dict[str, Any]],
    cfg: DataConfig,
    num_clips: int,
    num_crops: int,
    labels: list[int],
    num_classes: int,
    multi_label: bool,
    split: str,
) -> Iterator[tuple[torch.Tensor, int | torch.Tensor, str]]:
    """All test views of each video, uint8 (clips * crops, T, H, W, C), with its label (`label_target`:
    the split's label ids through `labels` into a label set of `num_classes`) and source key."""
    for sample in samples:
        try:
            video, meta = open_sample(sample, cfg.crop_size, cfg.decode_threads)
            views = test_views(video, cfg, num_clips, num_crops, (0, video.num_frames))
            where = f"split {split!r}: sample {sample_name(sample)}"
            label = label_target(meta, labels, num_classes, multi_label, where)
        except (*SAMPLE_ERRORS, IndexError) as err:
            log.warning("skipping evaluation sample %s: %s", sample_name(sample), err)
            continue
        yield views, label, str(meta["key"])


def _collate_eval(batch: list[tuple[torch.Tensor, int | torch.Tensor, str]]) -> EvalBatch:
    views, labels, keys = zip(*batch, strict=True)
    return torch.stack(views), stacked_labels(labels), list(keys)


def build_eval_loader(
    cfg: DataConfig,
    split: str,
    *,
    batch_size: int,
    num_clips: int = 1,
    num_crops: int = 1,
    rank: int | None = None,
    world_size: int | None = None,
    class_names: Sequence[str] | None = None,
    multi_label: bool = False,
) -> wds.WebLoader:
    """Evaluation batches (views uint8 (B, V, T, H, W, C) with V = clips x crops, labels, source
    keys); `rank`/`world_size` default to RANK / WORLD_SIZE or the torch.distributed group. Labels
    index `class_names` (the model's, K classes; default: the split's own): int64 (B,), or with
    `multi_label` float32 multi-hot (B, K); without it, a sample with several labels raises
    `MultiLabelSampleError`."""
    manifest = load_manifest(cfg.shards, split)
    class_names = class_names if class_names is not None else manifest.class_names
    labels = relabelled(manifest, class_names)
    urls = manifest.shard_urls()
    if rank is None or world_size is None:
        # Resolved here, in the evaluating process: DataLoader workers see no torch.distributed group
        # (and, under forkserver, only the environment the server started with).
        rank, world_size, _, _ = wds.utils.pytorch_worker_info()
    dataset = wds.DataPipeline(
        EvalSamples(urls, rank, world_size, log_and_continue, shard_cache(cfg)),
        partial(
            _eval_views,
            cfg=cfg,
            num_clips=num_clips,
            num_crops=num_crops,
            labels=labels,
            num_classes=len(class_names),
            multi_label=multi_label,
            split=split,
        ),
        wds.batched(batch_size, collation_fn=_collate_eval, partial=True),
    )
    return web_loader(dataset, cfg.num_workers, __name__)
