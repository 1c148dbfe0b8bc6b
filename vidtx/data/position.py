"""Where a rank is in its training epoch: what a checkpoint keeps so that a resumed run reads on exactly.

A rank's epoch is a deterministic stream (`vidtx.data.train_loader`): its shards dealt by (seed, epoch), each
DataLoader worker's share read in a seeded order through a seeded shuffle buffer, and each sample's
clips drawn by a generator seeded by the sample's place in its worker's stream. So where a rank is
comes down to how far each DataLoader worker's stream has been taken: the sample being taken (its
index in the stream) and how many of its clips (repeated sampling gives several; a batch may end
between them). A resumed loader replays each worker's stream up to that sample, reading and
shuffling but decoding nothing before it, so the rest of the epoch is the clips an uninterrupted run
would have seen, in the same order.

The stream also depends on settings: the world size, DataLoader workers, batch size, seed, shuffle
buffer, clips per video, the split's samples, the sources mixed and the class balance
(`StreamSettings`). A position taken with other settings cannot be replayed: the run then goes on
with the next epoch, a fresh seeded stream, and says so.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from pydantic import BaseModel, Field

from vidtx.config.data import Balance

Batch = TypeVar("Batch")


class StreamSettings(BaseModel):
    """What a rank's stream of an epoch depends on besides the epoch."""

    world_size: int = Field(description="train.num_workers")
    dataloader_workers: int = Field(description="data.num_workers")
    micro_batch_size: int = Field(description="train.micro_batch_size")
    seed: int = Field(description="train.seed")
    shuffle_buffer: int = Field(description="data.shuffle_buffer")
    repeated_sampling: int = Field(description="data.repeated_sampling")
    split_samples: int = Field(description="the training split's samples")
    sources: list[tuple[str, float]] = Field(default_factory=list, description="data.sources")
    balance: Balance = Field("none", description="data.balance")

    def changes_from(self, other: StreamSettings) -> str:
        """`setting a -> b` for each that differs from `other`'s, named as the config names it."""
        mine, theirs = self.model_dump(), other.model_dump()
        return ", ".join(
            f"{field.description} {theirs[name]} -> {mine[name]}"
            for name, field in type(self).model_fields.items()
            if mine[name] != theirs[name]
        )


class EpochPosition(BaseModel):
    """How far a rank has taken its epoch (what `TrainLoader.state_dict` returns)."""

    epoch: int = 0
    batches: int = Field(0, description="Batches of the epoch taken.")
    workers: list[tuple[int, int]] = Field(
        default_factory=list,
        description="Per DataLoader worker: the sample being taken (its index in the worker's stream) "
        "and how many of its clips were taken.",
    )
    stream: StreamSettings

    def start_of(self, worker: int) -> tuple[int, int]:
        """Where DataLoader worker `worker` starts: (samples to pass over, clips of the next to drop)."""
        return self.workers[worker] if worker < len(self.workers) else (0, 0)


def in_turn(
    batches: Iterable[Batch], first: int, workers: int, worker_of: Callable[[Batch], int]
) -> Iterator[Batch]:
    """`batches` from `workers` DataLoader workers in the order an epoch has them from its start:
    batch i from worker i % workers. A DataLoader begins with worker 0's batch, and a loader resumed
    after b batches has to begin with worker b % workers's (`first`): the others wait their turn."""
    waiting: list[collections.deque[Batch]] = [collections.deque() for _ in range(workers)]
    turn = first
    for batch in batches:
        waiting[worker_of(batch)].append(batch)
        while waiting[turn]:
            yield waiting[turn].popleft()
            turn = (turn + 1) % workers
