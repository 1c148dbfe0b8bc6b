"""Shards to clip batches: the webdataset pipelines for training and evaluation.

Training (one instance per Ray Train worker; RANK / WORLD_SIZE come from the environment):

    this rank's shards of the epoch (cycled, split by DataLoader worker) -> tar samples -> shuffle
    buffer -> decode once, sample k clips, augment (in DataLoader workers) -> uint8 batches (B, T, H, W, C)

Each epoch the shards are dealt out to the ranks (`vidtx.data.shares`: disjoint sets that together
are the whole split, on one node or many; with fewer shards than ranks every rank reads all of
them). A rank cycles through its own shards for exactly `ceil(num_samples / world_size / batch_size)`
batches, so ranks stay in lock-step for collectives however the shards' sizes differ; a pass over
them that gives not one clip is an error naming them. Iterating a train loader again continues
with the next epoch; a loader built with `epoch=e` replays epoch e exactly (resume).

Evaluation: the manifest's shards in order, split by rank (whole shards, and the ones left over by
sample: `vidtx.data.shares`) and by DataLoader worker, not resampled, so all ranks together see every
sample once and each rank of a split with at least as many samples as ranks has a share.

Clips leave the loader as uint8 in the decoders' layout (T, H, W, C) (pinned when CUDA is there);
`vidtx.data.transforms.normalize_clips` makes them the model's float (B, C, T, H, W) on the device.
Both stores of `vidtx.manifest` are read: a video member decoded with decord (PyAV as the fallback)
at the size the crop needs, or packed JPEG frames of which only the sampled ones are decoded.

A sample that fails to decode is logged and skipped, and so is whatever part of a tar cannot be read
(a truncated or missing shard); in training each is logged once per epoch, not on every pass: a
damaged shard costs its unreadable samples, never the run, unless none of a rank's shards gives a clip.
Decoders are created per sample inside the worker; workers start with `forkserver` so they inherit
no decoder or thread state.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

import numpy as np
import torch
import webdataset as wds

from vidtx import storage
from vidtx.cache import ShardCache
from vidtx.config import DataConfig
from vidtx.data.sampling import FrameSampler
from vidtx.data.shares import CycledSamples, EvalSamples, PassLedger, epoch_shards
from vidtx.data.transforms import EvalTransform, TrainTransform
from vidtx.locations import Location, name_of
from vidtx.manifest import FRAMES_MEMBER, VIDEO_EXTENSIONS, Manifest, damaged_shards, load_manifest
from vidtx.media.decode import Video, VideoDecodeError, open_video, scaled_size
from vidtx.media.frames import JpegFrames
from vidtx.processes import forkserver_context

log = logging.getLogger(__name__)

TrainBatch = tuple[torch.Tensor, torch.Tensor]  # clips uint8 (B, T, H, W, C), labels int64 (B,)
EvalBatch = tuple[torch.Tensor, torch.Tensor, list[str]]  # views uint8 (B, V, T, H, W, C), labels, keys
SAMPLE_ERRORS = (VideoDecodeError, KeyError, ValueError)  # what a bad sample raises when opened


def log_and_continue(err: Exception) -> bool:
    """webdataset handler: log what could not be read (a truncated or missing tar) and go on."""
    log.warning("skipping unreadable shard data: %s: %s", type(err).__name__, err)
    return True


def sample_name(sample: dict[str, Any]) -> str:
    """`<tar>:<key>` and, when its metadata can be read, the source video: names a sample in logs."""
    name = f"{sample.get('__url__', '?')}:{sample.get('__key__', '?')}"
    try:
        return f"{name} ({json.loads(sample['json'])['source']})"
    except (KeyError, TypeError, ValueError):
        return name


def open_sample(
    sample: dict[str, Any], short_side: int, num_threads: int, *, at_least: bool = False
) -> tuple[Video, dict[str, Any]]:
    """The sample's video with its short side at `short_side` (with `at_least`, JPEG frames may keep
    the first DCT scale above it: a random crop is resized anyway), and its json metadata."""
    meta = json.loads(sample["json"])
    stored = (meta["width"], meta["height"])
    size = scaled_size(*stored, short_side)
    if FRAMES_MEMBER in sample:
        return JpegFrames(
            sample[FRAMES_MEMBER], meta["offsets"], meta["fps"], size=size, at_least=at_least
        ), meta
    data = next((sample[ext[1:]] for ext in VIDEO_EXTENSIONS if ext[1:] in sample), None)
    if data is None:
        raise VideoDecodeError(f"no video member among {sorted(k for k in sample if not k.startswith('_'))}")
    return open_encoded(data, stored, short_side, num_threads), meta


def open_encoded(data: bytes, stored: tuple[int, int], short_side: int, num_threads: int) -> Video:
    """An encoded video of `stored` (width, height) decoded with its short side at `short_side`: how
    evaluation opens a shard's video member and the served model a video it is sent."""
    size = scaled_size(*stored, short_side)
    # decord scales while it decodes; at the stored size it needs no scaler at all
    return open_video(data, size=None if size == stored else size, num_threads=num_threads)


def _frames(video: Video, indices: np.ndarray) -> np.ndarray:
    """Frames for an index array of any shape, decoding each distinct frame once: (*shape, H, W, 3)."""
    unique, inverse = np.unique(indices, return_inverse=True)
    frames = video.frames(unique.tolist())  # (distinct, H, W, 3)
    if len(unique) == indices.size and np.array_equal(unique, indices.ravel()):
        return frames.reshape(*indices.shape, *frames.shape[1:])  # sorted, no repeats: no copy
    return frames[inverse.reshape(indices.shape)]


def _dataloader_worker() -> int:
    return wds.utils.pytorch_worker_info()[2]


def _train_clips(
    samples: Iterable[dict[str, Any]], cfg: DataConfig, seed: int, epoch: int, rank: int, ledger: PassLedger
) -> Iterator[tuple[torch.Tensor, int]]:
    """Decode each video once and yield `cfg.repeated_sampling` augmented uint8 clips (T, H, W, C) of
    it; what each sample gave goes into `ledger`. A sample that fails is logged once, not every pass."""
    rng = np.random.default_rng([seed, epoch, rank, _dataloader_worker()])
    sampler = FrameSampler(cfg.sampling, cfg.num_frames, cfg.frame_stride)
    transform = TrainTransform.from_config(cfg)
    failed: set[str] = set()
    for sample in samples:
        try:
            video, meta = open_sample(sample, cfg.short_side, cfg.decode_threads, at_least=True)
            indices = np.stack([sampler.train(video.num_frames, rng) for _ in range(cfg.repeated_sampling)])
            clips = [transform(frames, rng) for frames in _frames(video, indices)]
        except SAMPLE_ERRORS as err:
            if (name := sample_name(sample)) not in failed:
                failed.add(name)
                log.warning("skipping training sample %s: %s", name, err)
            clips = []
        ledger.decoded(sample["__pass__"], len(clips))
        for clip in clips:
            yield clip, int(meta["label"])


def test_views(video: Video, cfg: DataConfig, num_clips: int, num_crops: int) -> torch.Tensor:
    """The multi-view test protocol for one video: uint8 views (clips * crops, T, crop, crop, C).

    `video` must be decoded with its short side at `cfg.crop_size`, so the crops cover the frame.
    """
    sampler = FrameSampler(cfg.sampling, cfg.num_frames, cfg.frame_stride)
    transform = EvalTransform(cfg.crop_size, num_crops)
    clips = _frames(video, sampler.test(video.num_frames, num_clips))  # (clips, T, H, W, 3)
    return torch.cat([transform(frames) for frames in clips])


def _eval_views(
    samples: Iterable[dict[str, Any]], cfg: DataConfig, num_clips: int, num_crops: int
) -> Iterator[tuple[torch.Tensor, int, str]]:
    """All test views of each video, uint8 (clips * crops, T, H, W, C), with its label and source key."""
    for sample in samples:
        try:
            video, meta = open_sample(sample, cfg.crop_size, cfg.decode_threads)
            views = test_views(video, cfg, num_clips, num_crops)
        except SAMPLE_ERRORS as err:
            log.warning("skipping evaluation sample %s: %s", sample_name(sample), err)
            continue
        yield views, int(meta["label"]), str(meta["key"])


def _collate_train(batch: list[tuple[torch.Tensor, int]]) -> TrainBatch:
    clips, labels = zip(*batch, strict=True)
    return torch.stack(clips), torch.tensor(labels, dtype=torch.int64)


def _collate_eval(batch: list[tuple[torch.Tensor, int, str]]) -> EvalBatch:
    views, labels, keys = zip(*batch, strict=True)
    return torch.stack(views), torch.tensor(labels, dtype=torch.int64), list(keys)


def _web_loader(dataset: wds.DataPipeline, num_workers: int) -> wds.WebLoader:
    workers = {"multiprocessing_context": forkserver_context(__name__)} if num_workers > 0 else {}
    return wds.WebLoader(
        dataset, batch_size=None, num_workers=num_workers, pin_memory=torch.cuda.is_available(), **workers
    )


def shard_cache(cfg: DataConfig) -> ShardCache | None:
    """The local cache of shards read from a bucket that `cfg` asks for (`data.cache_dir`)."""
    return ShardCache(cfg.cache_dir, int(cfg.cache_gb * 1e9)) if cfg.cache_dir is not None else None


def _check_shards(manifest: Manifest, shards_dir: Location) -> None:
    """Warn about damaged shards (what can be read of them is still used); fail at once, naming the
    folder, when no shard file exists at all."""
    for problem in damaged_shards(manifest, check_sha256=False):
        log.warning("split %s: damaged shard %s; its unreadable samples are skipped", manifest.split, problem)
    if not any(storage.is_file(url) for url in manifest.shard_urls()):
        raise FileNotFoundError(
            f"{shards_dir}: none of the {len(manifest.shards)} '{manifest.split}' shards exists"
        )


class TrainLoader:
    """One epoch of training batches per iteration; the next iteration is the next epoch."""

    def __init__(self, cfg: DataConfig, batch_size: int, seed: int, epoch: int) -> None:
        self.cfg, self.batch_size, self.seed, self.epoch = cfg, batch_size, seed, epoch
        self.manifest = load_manifest(cfg.shards, cfg.train_split)
        _check_shards(self.manifest, cfg.shards)
        # Resolved here, in the training process: DataLoader workers see no torch.distributed group.
        self.rank, self.world_size, _, _ = wds.utils.pytorch_worker_info()
        self.batches_per_epoch = math.ceil(self.manifest.num_samples / self.world_size / batch_size)

    def __len__(self) -> int:
        return self.batches_per_epoch

    def __iter__(self) -> Iterator[TrainBatch]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        shards = epoch_shards(self.manifest.shard_urls(), self.seed, epoch, self.rank, self.world_size)
        log.info(
            "rank %d/%d epoch %d reads shards %s",
            self.rank,
            self.world_size,
            epoch,
            ",".join(name_of(url) for url in shards),
        )
        stream_seed = wds.utils.make_seed(self.seed, epoch, self.rank)
        ledger = PassLedger()
        dataset = wds.DataPipeline(
            CycledSamples(shards, stream_seed, self.rank, log_and_continue, ledger, shard_cache(self.cfg)),
            wds.detshuffle(self.cfg.shuffle_buffer, initial=self.cfg.shuffle_buffer, seed=self.seed + epoch),
            partial(_train_clips, cfg=self.cfg, seed=self.seed, epoch=epoch, rank=self.rank, ledger=ledger),
            wds.batched(self.batch_size, collation_fn=_collate_train, partial=False),
        )
        loader = _web_loader(dataset, self.cfg.num_workers).with_epoch(self.batches_per_epoch)
        return iter(loader)


def build_train_loader(cfg: DataConfig, *, batch_size: int, seed: int, epoch: int = 0) -> TrainLoader:
    """Training batches (clips uint8 (B, T, H, W, C), labels int64 (B,)); one iteration is one epoch
    of about num_samples / world_size clips for this rank."""
    return TrainLoader(cfg, batch_size, seed, epoch)


def build_eval_loader(
    cfg: DataConfig,
    split: str,
    *,
    batch_size: int,
    num_clips: int = 1,
    num_crops: int = 1,
    rank: int | None = None,
    world_size: int | None = None,
) -> wds.WebLoader:
    """Evaluation batches (views uint8 (B, V, T, H, W, C) with V = clips x crops, labels (B,), source
    keys); `rank`/`world_size` default to RANK / WORLD_SIZE or the torch.distributed group."""
    urls = load_manifest(cfg.shards, split).shard_urls()
    if rank is None or world_size is None:
        # Resolved here, in the evaluating process: DataLoader workers see no torch.distributed group
        # (and, under forkserver, only the environment the server started with).
        rank, world_size, _, _ = wds.utils.pytorch_worker_info()
    dataset = wds.DataPipeline(
        EvalSamples(urls, rank, world_size, log_and_continue, shard_cache(cfg)),
        partial(_eval_views, cfg=cfg, num_clips=num_clips, num_crops=num_crops),
        wds.batched(batch_size, collation_fn=_collate_eval, partial=True),
    )
    return _web_loader(dataset, cfg.num_workers)
