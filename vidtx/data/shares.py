"""Which samples each rank, and each DataLoader worker of a rank, reads.

Training: each epoch the shards are dealt out to the ranks from a seeded permutation that every rank
draws alike (`epoch_shards`), and each rank reads its own pass after pass (`CycledSamples`) for as
many batches as the epoch has. A pass that yields no sample at all is an error naming the shards:
the next pass would read the same bytes, so the loader would wait for a batch forever.

Evaluation: every sample of the split exactly once over all ranks (`EvalSamples`). Whole shards are
dealt round-robin while each rank gets one; the shards left over (fewer than the ranks, e.g. the one
shard of a small split) are shared by sample, so that every rank has a share of a split with at least
as many samples as ranks (validation's all-reduce needs every rank anyway: an idle one would wait).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import webdataset as wds

from vidtx.cache import ShardCache
from vidtx.data.tar_reader import tar_samples
from vidtx.locations import name_of, parent_of

Handler = Callable[[Exception], bool]  # what a webdataset stage does with an error (True: go on)


class UnreadableShardsError(ValueError):
    """Not one sample of a rank's shards could be read: the data is damaged (one line for the CLI)."""


def epoch_shards(urls: list[str], seed: int, epoch: int, rank: int, world_size: int) -> list[str]:
    """This rank's shards in `epoch`: a permutation seeded by (seed, epoch), the same on every rank,
    dealt round-robin, so the ranks' sets are disjoint and cover the split. Fewer shards than ranks:
    every rank reads all of them (rather than a rank with nothing to train on)."""
    if len(urls) < world_size:
        return list(urls)
    order = np.random.default_rng([seed, epoch]).permutation(len(urls))
    return [urls[i] for i in order[rank::world_size]]


def _go_on(err: Exception) -> bool:
    return True


class CycledSamples(torch.utils.data.IterableDataset):
    """An endless stream of samples from one rank's shards, split by DataLoader worker (a worker left
    without one reads all of the rank's), in a new order each pass. Read errors go to `handler` on
    the first pass only: later passes meet the same ones."""

    def __init__(
        self, urls: list[str], seed: int, rank: int, handler: Handler, cache: ShardCache | None = None
    ) -> None:
        self.urls, self.seed, self.rank, self.handler, self.cache = urls, seed, rank, handler, cache

    def __iter__(self) -> Iterator[dict[str, Any]]:
        _, _, worker, num_workers = wds.utils.pytorch_worker_info()
        mine = self.urls[worker::num_workers] or self.urls
        rng = np.random.default_rng([self.seed, worker])
        handler = self.handler
        while True:
            read = 0
            order = ({"url": mine[i]} for i in rng.permutation(len(mine)))
            for sample in tar_samples(order, handler, self.cache):
                read += 1
                yield sample
            if not read:
                who = f"rank {self.rank}" + (f", DataLoader worker {worker}" if num_workers > 1 else "")
                names = ", ".join(name_of(url) for url in mine)
                raise UnreadableShardsError(
                    f"{who}: not one sample could be read from its shards {names} in "
                    f"{parent_of(mine[0])} (damaged: `vidtx inspect` checks them)"
                )
            handler = _go_on


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
