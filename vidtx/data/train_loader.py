"""Shards to training batches: one instance per Ray Train worker (RANK / WORLD_SIZE come from the
environment).

    per source: this rank's shards of the epoch (cycled, split by DataLoader worker) -> tar samples
    -> mixed by weight (`vidtx.data.training_data`) -> shuffle buffer -> decode once, sample k clips,
    augment (in DataLoader workers) -> uint8 batches (B, T, H, W, C), labels in the merged label set
    (int64 ids, or float32 multi-hot vectors with `multi_label`: `vidtx.data.labels`)

Each epoch each source's shards are dealt out to the ranks (`vidtx.data.shares`: disjoint sets that together
are the whole split, on one node or many; with fewer shards than ranks every rank reads all of
them). A rank cycles through its own shards for exactly `ceil(num_samples / world_size / batch_size)`
batches, so ranks stay in lock-step for collectives however the shards' sizes differ; a pass over
them that gives not one clip is an error naming them. Iterating a train loader again continues
with the next epoch; a loader built with `epoch=e` replays epoch e exactly. Where a rank stands in
its epoch is the loader's state (`state_dict`, `vidtx.data.position`): a checkpoint keeps it, and a
resumed run's loader goes on with exactly the clips an uninterrupted run would have seen.

Frames-store shards in a bucket read without a cache: each DataLoader worker reads samples' frames
ahead of the decoder (`vidtx.data.read_ahead`).

What the decoding, the logging of unreadable data and the DataLoader workers have in common with
evaluation is in `vidtx.data.eval_loader`; a sample that fails is logged once per epoch, not every pass.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import torch
import webdataset as wds

from vidtx.cache import shard_cache
from vidtx.clips.sampling import FrameSampler
from vidtx.clips.views import frames_at
from vidtx.config import DataConfig
from vidtx.data.fetch_ahead import fetch_settings
from vidtx.data.labels import label_target, stacked_labels
from vidtx.data.position import EpochPosition, StreamSettings, in_turn
from vidtx.data.read_ahead import Opened, Pending, open_pending, read_ahead
from vidtx.data.samples import SAMPLE_ERRORS, sample_name
from vidtx.data.shares import CycledSamples, MixedSamples, PassLedger, epoch_shards
from vidtx.data.training_data import TrainingData, TrainingSource, training_data
from vidtx.data.transforms import TrainTransform
from vidtx.data.web_loader import check_shards, log_and_continue, web_loader
from vidtx.storage import name_of

log = logging.getLogger(__name__)


class TrainBatch(NamedTuple):
    clips: torch.Tensor  # uint8 (B, T, H, W, C)
    labels: torch.Tensor  # int64 (B,); with multi_label float32 multi-hot (B, K), K classes
    keys: list[str]  # each clip's sample


def _dataloader_worker() -> int:
    return wds.utils.pytorch_worker_info()[2]


class TrainClip(NamedTuple):
    """A clip on its way to a batch, with where it came from in its DataLoader worker's stream."""

    clip: torch.Tensor  # uint8 (T, H, W, C)
    label: int | torch.Tensor  # the label id, or with multi_label float32 multi-hot (K,)
    key: str  # the sample's key
    worker: int  # the DataLoader worker
    sample: int  # the sample's index in the worker's stream
    taken: int  # the sample's clips taken up to this one


def _train_clips(
    samples: Iterable[dict[str, Any]],
    cfg: DataConfig,
    seed: int,
    rank: int,
    data: TrainingData,
    ledgers: list[PassLedger],
    start: EpochPosition,
    multi_label: bool,
) -> Iterator[TrainClip]:
    """Decode each video once and yield `cfg.repeated_sampling` augmented uint8 clips of it, labelled
    in `data`'s merged label set (`label_target`); what each sample gave goes into its source's
    ledger. A sample that fails is logged once, not every pass. The worker's
    stream starts where `start` has it: the samples before are passed over undecoded (they were
    judged by the ledger of the run that took them), and the clips taken of the next one dropped."""
    worker = _dataloader_worker()
    skip, drop = start.start_of(worker)
    sampler = FrameSampler(cfg.sampling, cfg.num_frames, cfg.frame_stride)
    transform = TrainTransform.from_config(cfg)
    failed: set[str] = set()

    def pending() -> Iterator[Pending]:
        for index, sample in enumerate(samples):
            if index < skip:
                ledgers[sample["__source__"]].passed_over(sample["__pass__"])
                continue
            yield Pending(index, sample, np.random.default_rng([seed, start.epoch, rank, worker, index]))

    for item in read_ahead(pending(), cfg.read_ahead, partial(open_pending, cfg=cfg, sampler=sampler)):
        opened = item.opened if item.opened is not None else open_pending(item, cfg, sampler)
        clips: list[torch.Tensor] = []
        error = opened if isinstance(opened, Exception) else None
        if isinstance(opened, Opened):
            try:
                source = data.sources[item.sample["__source__"]]
                where = f"split {source.manifest.split!r}: sample {sample_name(item.sample)}"
                label = label_target(opened.meta, source.labels, len(data.class_names), multi_label, where)
                key = str(opened.meta["key"])
                clips = [transform(frames, item.rng) for frames in frames_at(opened.video, opened.indices)]
            except (*SAMPLE_ERRORS, IndexError) as err:
                error = err
        if error is not None and (name := sample_name(item.sample)) not in failed:
            failed.add(name)
            log.warning("skipping training sample %s: %s", name, error)
        ledgers[item.sample["__source__"]].decoded(item.sample["__pass__"], len(clips))
        for taken, clip in enumerate(clips, start=1):
            if item.index > skip or taken > drop:
                yield TrainClip(clip, label, key, worker, item.index, taken)


def _collate_train(batch: list[TrainClip]) -> tuple[TrainBatch, TrainClip]:
    """The batch, and its last clip's place (where its worker's stream stands after it)."""
    clips = torch.stack([item.clip for item in batch])
    labels = stacked_labels([item.label for item in batch])
    return TrainBatch(clips, labels, [item.key for item in batch]), batch[-1]._replace(clip=torch.empty(0))


class TrainLoader:
    """One epoch of training batches per iteration; the next iteration is the next epoch. An
    iteration left part-way continues from there: `state_dict` is where the rank is in the epoch
    (`vidtx.data.position`), which `load_state_dict` restores exactly."""

    def __init__(self, cfg: DataConfig, batch_size: int, seed: int, epoch: int, multi_label: bool) -> None:
        self.cfg, self.batch_size, self.seed, self.multi_label = cfg, batch_size, seed, multi_label
        self.data = training_data(cfg)
        for source in self.data.sources:
            check_shards(source.manifest, source.shards)
        self.keep = self.data.keep_probabilities() if cfg.balance == "classes" else None
        # Resolved here, in the training process: DataLoader workers see no torch.distributed group.
        self.rank, self.world_size, _, _ = wds.utils.pytorch_worker_info()
        self.batches_per_epoch = math.ceil(self.data.num_samples / self.world_size / batch_size)
        self.stream = StreamSettings(
            world_size=self.world_size,
            dataloader_workers=cfg.num_workers,
            micro_batch_size=batch_size,
            seed=seed,
            shuffle_buffer=cfg.shuffle_buffer,
            repeated_sampling=cfg.repeated_sampling,
            split_samples=self.data.num_samples,
            sources=[(str(source.shards), source.weight) for source in cfg.sources],
            balance=cfg.balance,
        )
        self.start_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self.position.epoch

    def __len__(self) -> int:
        return self.batches_per_epoch

    def state_dict(self) -> dict[str, Any]:
        return self.position.model_dump(mode="json")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where `state` (a `state_dict`) was; a position taken with other settings cannot be
        replayed: the next epoch starts instead (logged, naming the settings)."""
        position = EpochPosition.model_validate(state)
        if changes := self.stream.changes_from(position.stream):
            log.warning(
                "rank %d: the data stream of epoch %d cannot be replayed (%s): training goes on with epoch %d",
                self.rank,
                position.epoch,
                changes,
                position.epoch + 1,
            )
            self.start_epoch(position.epoch + 1)
        elif position.batches >= self.batches_per_epoch:  # taken at the end of its epoch
            self.start_epoch(position.epoch + 1)
        else:
            self.position = position

    def start_epoch(self, epoch: int) -> None:
        """The next iteration is epoch `epoch`, from its start."""
        self.position = EpochPosition(epoch=epoch, stream=self.stream)

    def __iter__(self) -> Iterator[TrainBatch]:
        start = self.position
        stream_seed = wds.utils.make_seed(self.seed, start.epoch, self.rank)
        streams = [
            self._source_stream(source, start.epoch, stream_seed + index)
            for index, source in enumerate(self.data.sources)
        ]
        dataset = wds.DataPipeline(
            MixedSamples(streams, self.data, stream_seed, self.keep),
            wds.detshuffle(
                self.cfg.shuffle_buffer, initial=self.cfg.shuffle_buffer, seed=self.seed + start.epoch
            ),
            partial(
                _train_clips,
                cfg=self.cfg,
                seed=self.seed,
                rank=self.rank,
                data=self.data,
                ledgers=[stream.ledger for stream in streams],
                start=start,
                multi_label=self.multi_label,
            ),
            wds.batched(self.batch_size, collation_fn=_collate_train, partial=False),
        )
        workers = max(1, self.cfg.num_workers)
        batches = in_turn(
            web_loader(dataset, self.cfg.num_workers, __name__),
            start.batches % workers,
            workers,
            lambda b: b[1].worker,
        )
        places = dict(enumerate(start.workers))
        for taken, (batch, last) in enumerate(
            itertools.islice(batches, self.batches_per_epoch - start.batches), start=start.batches + 1
        ):
            places[last.worker] = (last.sample, last.taken)
            self.position = start.model_copy(
                update={"batches": taken, "workers": [places.get(w, (0, 0)) for w in range(workers)]}
            )
            yield batch
        self.start_epoch(start.epoch + 1)

    def _source_stream(self, source: TrainingSource, epoch: int, seed: int) -> CycledSamples:
        """The samples of this rank's shards of `source` in `epoch`, pass after pass."""
        shards = epoch_shards(source.manifest.shard_urls(), self.seed, epoch, self.rank, self.world_size)
        log.info(
            "rank %d/%d epoch %d reads shards %s of %s%s",
            self.rank,
            self.world_size,
            epoch,
            ",".join(name_of(url) for url in shards),
            source.shards,
            f" from batch {self.position.batches}" if self.position.batches else "",
        )
        fetch = fetch_settings(self.cfg, source.manifest, len(self.data.sources))
        return CycledSamples(
            shards, seed, self.rank, log_and_continue, PassLedger(), shard_cache(self.cfg), fetch
        )


def build_train_loader(
    cfg: DataConfig, *, batch_size: int, seed: int, epoch: int = 0, multi_label: bool = False
) -> TrainLoader:
    """Training batches (clips uint8 (B, T, H, W, C), labels, sample keys); one iteration is one epoch
    of about num_samples / world_size clips for this rank. Labels index the merged label set of K
    classes (`TrainLoader.data.class_names`): int64 (B,), or with `multi_label` float32 multi-hot
    (B, K); without it, a sample with several labels raises `MultiLabelSampleError`."""
    return TrainLoader(cfg, batch_size, seed, epoch, multi_label)
