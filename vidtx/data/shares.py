"""Which samples each rank, and each DataLoader worker of a rank, reads.

Training: each epoch the shards are dealt out to the ranks from a seeded permutation that every rank
draws alike (`epoch_shards`), and each rank reads its own pass after pass (`CycledSamples`) for as
many batches as the epoch has. A pass that gives the decoder not one clip (no sample at all, or only
samples that fail to decode: a tar cut anywhere in its first sample) is an error naming the shards
(`PassLedger`): the next pass would read the same bytes, so the loader would wait for a batch forever.
Several sources (`data.sources`) are one stream per source, mixed by weight (`MixedSamples`).

Evaluation: every sample of the split exactly once over all ranks (`EvalSamples`). Whole shards are
dealt round-robin while each rank gets one; the shards left over (fewer than the ranks, e.g. the one
shard of a small split) are shared by sample, so that every rank has a share of a split with at least
as many samples as ranks (validation's all-reduce needs every rank anyway: an idle one would wait).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import webdataset as wds

from vidtx import storage
from vidtx.cache import ShardCache
from vidtx.data.fetch_ahead import FetchAhead, FetchSettings
from vidtx.data.tar_reader import tar_samples
from vidtx.data.training_data import TrainingData
from vidtx.storage import name_of, parent_of

Handler = Callable[[Exception], bool]  # what a webdataset stage does with an error (True: go on)


class UnreadableShardsError(ValueError):
    """Not one clip of a rank's shards could be read: the data is damaged (one line for the CLI)."""

    def __init__(self, message: str) -> None:
        # A DataLoader worker's exception reaches the training process as `type(text)`, the text
        # being torch's "Caught ... in DataLoader worker process N" and the worker's traceback, whose
        # last line is this error's own: keep that line.
        own_line = f"{type(self).__module__}.{type(self).__qualname__}: "
        super().__init__(message.rstrip().rsplit(own_line, 1)[-1])


def epoch_shards(urls: list[str], seed: int, epoch: int, rank: int, world_size: int) -> list[str]:
    """This rank's shards in `epoch`: a permutation seeded by (seed, epoch), the same on every rank,
    dealt round-robin, so the ranks' sets are disjoint and cover the split. Fewer shards than ranks:
    every rank reads all of them (rather than a rank with nothing to train on)."""
    if len(urls) < world_size:
        return list(urls)
    order = np.random.default_rng([seed, epoch]).permutation(len(urls))
    return [urls[i] for i in order[rank::world_size]]


class PassLedger:
    """What each pass of `CycledSamples` over a rank's shards gave the decoder. The reader records how
    many samples a pass had once it is over, the decoder how many clips each sample gave; a pass whose
    samples were all decoded without one clip raises `UnreadableShardsError`. Samples reach the decoder
    through the shuffle buffer, mixed with the next passes', so a pass is judged when its last sample
    has been decoded. One ledger per DataLoader worker (the pipeline is copied into each)."""

    def __init__(self) -> None:
        self._samples: dict[int, int] = {}  # pass -> samples it had, once it is over and until judged
        self._decoded: Counter[int] = Counter()  # pass -> its samples decoded so far
        self._clips: Counter[int] = Counter()  # pass -> clips they gave
        self._unreadable = ""  # the error: which rank, worker and shards

    def read(self, number: int, samples: int, unreadable: str) -> None:
        """Pass `number` is over, having read `samples`; `unreadable` is the error if it gives no clip."""
        if not samples:
            raise UnreadableShardsError(unreadable)
        self._samples[number], self._unreadable = samples, unreadable

    def passed_over(self, number: int) -> None:
        """A sample of pass `number` was passed over undecoded (class balance, or a resumed stream
        before its place): it counts as readable."""
        self.decoded(number, 1)

    def decoded(self, number: int, clips: int) -> None:
        """A sample of pass `number` gave `clips` clips (0: it failed to decode)."""
        self._decoded[number] += 1
        self._clips[number] += clips
        for judged in [n for n, samples in self._samples.items() if self._decoded[n] == samples]:
            if not self._clips[judged]:
                raise UnreadableShardsError(self._unreadable)
            del self._samples[judged], self._decoded[judged], self._clips[judged]


class CycledSamples(torch.utils.data.IterableDataset):
    """An endless stream of samples from one rank's shards, split by DataLoader worker (a worker left
    without one reads all of the rank's), in a new order each pass; each sample carries its pass's
    number as `__pass__` for the decoder's entries in `ledger`. Read errors go to `handler` on every
    pass: a shard is never skipped without a line, whether it is damaged (a line each pass) or was
    unreadable while its store was down for longer than the client's retries."""

    def __init__(
        self,
        urls: list[str],
        seed: int,
        rank: int,
        handler: Handler,
        ledger: PassLedger,
        cache: ShardCache | None = None,
        fetch: FetchSettings | None = None,
    ) -> None:
        self.urls, self.seed, self.rank, self.handler, self.cache = urls, seed, rank, handler, cache
        self.ledger, self.fetch = ledger, fetch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        _, _, worker, num_workers = wds.utils.pytorch_worker_info()
        mine = self.urls[worker::num_workers] or self.urls
        who = f"rank {self.rank}" + (f", DataLoader worker {worker}" if num_workers > 1 else "")
        unreadable = (
            f"{who}: not one clip could be read from its shards {', '.join(name_of(url) for url in mine)} "
            f"in {parent_of(mine[0])} (damaged: `vidtx inspect` checks them)"
        )
        rng = np.random.default_rng([self.seed, worker])
        passes = ([mine[i] for i in rng.permutation(len(mine))] for _ in itertools.count())
        fetcher = None
        if (
            self.cache is not None
            and self.fetch is not None
            and self.fetch.ahead
            and storage.local_path(mine[0]) is None
        ):
            fetcher = FetchAhead(self.cache, self.fetch)
        copies = fetcher or self.cache
        order = next(passes)
        if fetcher is not None:
            fetcher.plan(order)
        try:
            for number in itertools.count():
                following = next(passes)  # known a pass ahead: fetched ahead across the passes' seam
                if fetcher is not None:
                    fetcher.plan(following)
                read = 0
                for sample in tar_samples([{"url": url} for url in order], self.handler, copies):
                    read += 1
                    yield sample | {"__pass__": number}
                self.ledger.read(number, read, unreadable)
                order = following
        finally:
            if fetcher is not None:
                fetcher.close()


class MixedSamples(torch.utils.data.IterableDataset):
    """One DataLoader worker's stream of samples from several sources' `CycledSamples`, each sample
    drawn from a source by weight and tagged with it (`__source__`); with `keep` ((classes,) the
    chance that a sample of each merged class stays), samples are passed over to balance classes.
    One source without `keep` is its stream unchanged: no draw is made."""

    def __init__(
        self, streams: Sequence[CycledSamples], data: TrainingData, seed: int, keep: np.ndarray | None
    ) -> None:
        self.streams, self.data, self.seed, self.keep = list(streams), data, seed, keep

    def __iter__(self) -> Iterator[dict[str, Any]]:
        _, _, worker, _ = wds.utils.pytorch_worker_info()
        rng = np.random.default_rng([self.seed, worker, len(self.streams)])
        samples = [iter(stream) for stream in self.streams]
        weights = self.data.weights
        try:
            while True:
                source = int(rng.choice(len(samples), p=weights)) if len(samples) > 1 else 0
                sample = next(samples[source])
                if self.keep is not None:
                    label = _label(sample, self.data.sources[source].labels)
                    if label is not None and rng.random() >= self.keep[label]:
                        self.streams[source].ledger.passed_over(sample["__pass__"])
                        continue
                yield sample | {"__source__": source}
        finally:  # each source's reader stops its fetcher
            for stream in samples:
                stream.close()


def _label(sample: dict[str, Any], labels: tuple[int, ...]) -> int | None:
    """The sample's merged label, from its metadata; None where that cannot be read (the decoder
    reports the sample)."""
    try:
        return labels[int(json.loads(sample["json"])["label"])]
    except (KeyError, TypeError, ValueError, IndexError):
        return None


class EvalSamples(torch.utils.data.IterableDataset):
    """This rank's samples of an evaluation split, in order: the whole shards `urls[rank:whole:world_size]`
    (`whole`: the largest multiple of `world_size` shards), then sample i of the shards left over, read
    as one stream, for every i % world_size == rank. DataLoader workers split these parts between them."""

    def __init__(
        self, urls: list[str], rank: int, world_size: int, handler: Handler, cache: ShardCache | None = None
    ) -> None:
        whole = len(urls) - len(urls) % world_size
        self.parts = [([url], 0, 1) for url in urls[rank:whole:world_size]]  # (shards, first, step)
        if whole < len(urls):
            self.parts.append((urls[whole:], rank, world_size))
        self.handler, self.cache = handler, cache

    def __iter__(self) -> Iterator[dict[str, Any]]:
        _, _, worker, num_workers = wds.utils.pytorch_worker_info()
        for urls, first, step in self.parts[worker::num_workers]:
            samples = tar_samples([{"url": url} for url in urls], self.handler, self.cache)
            yield from itertools.islice(samples, first, None, step)
