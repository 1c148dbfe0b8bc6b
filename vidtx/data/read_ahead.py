"""Opening a DataLoader worker's training samples ahead of the decoder.

Frames-store shards in a bucket read without a cache: a clip reads only its frames' bytes, a ranged
GET per span of near frames (`vidtx.storage.read_ranges`, its spans in flight at once). A worker
opens each sample `data.read_ahead` samples before the decoder reaches it and starts that read in a
thread, so that the next samples' requests are in flight while the decoder decodes this one. Opening
draws the sample's frame indices from its own generator (seeded by its place in the worker's
stream), so the draws keep their order, its frames then its augmentation, and exact resume holds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from vidtx import storage
from vidtx.clips.sampling import FrameSampler
from vidtx.config import DataConfig
from vidtx.data.samples import SAMPLE_ERRORS, open_sample
from vidtx.data.tar_reader import MemberRange
from vidtx.manifest import FRAMES_MEMBER
from vidtx.media.decode import Video
from vidtx.media.frames import JpegFrames


class Opened(NamedTuple):
    video: Video
    meta: dict[str, Any]
    indices: np.ndarray  # (repeated_sampling, T): the frames each clip takes


@dataclass
class Pending:
    """A sample on its way to the decoder: its place in the worker's stream, its generator (seeded by
    the place: a resumed stream draws what this one drew), and what opening it gave, once opened."""

    index: int
    sample: dict[str, Any]
    rng: np.random.Generator
    opened: Opened | Exception | None = None


def open_pending(pending: Pending, cfg: DataConfig, sampler: FrameSampler) -> Opened | Exception:
    """The sample's video and the frames its clips take (the generator's first draws)."""
    try:
        video, meta = open_sample(pending.sample, cfg.short_side, cfg.decode_threads, at_least=True)
        draws = [sampler.train(video.num_frames, pending.rng) for _ in range(cfg.repeated_sampling)]
    except SAMPLE_ERRORS as err:
        return err
    return Opened(video, meta, np.stack(draws))


def _in_a_bucket(sample: dict[str, Any]) -> bool:
    member = sample.get(FRAMES_MEMBER)
    return isinstance(member, MemberRange) and storage.local_path(member.path) is None


def read_ahead(
    pending: Iterable[Pending], ahead: int, opener: Callable[[Pending], Opened | Exception]
) -> Iterator[Pending]:
    """`pending` in order, a frames-store sample in a bucket opened `ahead` samples before its turn
    and the read of its frames started then, in a thread: `ahead` samples' reads in flight instead of
    one, each sample's frames waiting when the decoder comes to it."""
    if not ahead:
        yield from pending
        return
    window: deque[Pending] = deque()
    pool = ThreadPoolExecutor(ahead, thread_name_prefix="vidtx-read-ahead")
    try:
        for item in pending:
            if _in_a_bucket(item.sample):
                item.opened = opener(item)
                if isinstance(item.opened, Opened) and isinstance(item.opened.video, JpegFrames):
                    item.opened.video.read_ahead(np.unique(item.opened.indices), pool)
            window.append(item)
            if len(window) > ahead:
                yield window.popleft()
        yield from window
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
