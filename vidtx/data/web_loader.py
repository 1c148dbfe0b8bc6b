"""What the train and evaluation loaders share: a webdataset pipeline through DataLoader workers
started by a forkserver, the handler that skips unreadable shard data, and the check that a split's
shards exist."""

from __future__ import annotations

import logging

import torch
import webdataset as wds

from vidtx import storage
from vidtx.locations import Location
from vidtx.manifest import Manifest, damaged_shards
from vidtx.processes import forkserver_context

log = logging.getLogger(__name__)


def log_and_continue(err: Exception) -> bool:
    """webdataset handler: log what could not be read (a truncated or missing tar) and go on."""
    log.warning("skipping unreadable shard data: %s: %s", type(err).__name__, err)
    return True


def web_loader(dataset: wds.DataPipeline, num_workers: int, preload: str) -> wds.WebLoader:
    """`dataset` through `num_workers` DataLoader workers, started by a forkserver that has imported
    `preload` (the module of the pipeline's stages)."""
    workers = {"multiprocessing_context": forkserver_context(preload)} if num_workers > 0 else {}
    return wds.WebLoader(
        dataset, batch_size=None, num_workers=num_workers, pin_memory=torch.cuda.is_available(), **workers
    )


def check_shards(manifest: Manifest, shards_dir: Location) -> None:
    """Warn about damaged shards (what can be read of them is still used); fail at once, naming the
    folder, when no shard file exists at all."""
    for problem in damaged_shards(manifest, check_sha256=False):
        log.warning("split %s: damaged shard %s; its unreadable samples are skipped", manifest.split, problem)
    if not any(storage.is_file(url) for url in manifest.shard_urls()):
        raise FileNotFoundError(
            f"{shards_dir}: none of the {len(manifest.shards)} '{manifest.split}' shards exists"
        )
