"""Fetching a reader's next shards from a bucket before it reads them.

Each DataLoader worker of a rank knows the shards it will read before it reads them: its share of
the rank's deal for the epoch (`vidtx.data.shares`), pass after pass, in a seeded order. Told that
order (`plan`), `FetchAhead` downloads the next `ahead` shards into the node's cache in the
background, each in parts (ranged GETs of `part_bytes`, `requests` of them in flight), while the
reader decodes the current one; the reader's `local_copy` then finds its shard on disk.

It never holds more than `budget` bytes of shards fetched and not yet read, with the one being read:
its share of `data.cache_gb` (the cache's limit over the node's fetching processes), so the cache
never holds more than its limit for fetch-ahead, and evicts what was read longest ago. A shard two
processes of a node want is fetched once (the cache's lock). A fetch that fails fails the reader's
`local_copy` of that shard: the damaged-shard path (logged, skipped, the deal unchanged).
"""

from __future__ import annotations

import functools
import os
import threading
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from vidtx import storage
from vidtx.cache import ShardCache
from vidtx.config import DataConfig
from vidtx.manifest import Manifest


@dataclass(frozen=True)
class FetchSettings:
    ahead: int  # shards fetched ahead of the one being read
    requests: int  # ranged GETs in flight
    part_bytes: int  # bytes per ranged GET
    budget: int  # bytes of shards fetched and not yet read, with the one being read
    sizes: dict[str, int] = field(default_factory=dict)  # each shard's bytes (its manifest's)


class FetchAhead:
    """A reader's view of the cache, fetching ahead of it (`local_copy`, as `ShardCache` has)."""

    def __init__(self, cache: ShardCache, settings: FetchSettings) -> None:
        self.cache, self.settings = cache, settings
        self._parts = ThreadPoolExecutor(settings.requests, thread_name_prefix="vidtx-fetch-part")
        self._shards = ThreadPoolExecutor(max(1, settings.ahead), thread_name_prefix="vidtx-fetch")
        self._download = functools.partial(
            storage.download_in_parts, part_bytes=settings.part_bytes, pool=self._parts
        )
        self._planned: deque[str] = deque()  # shards to read, in order
        self._fetched: dict[str, Future[Path]] = {}  # fetching or fetched, not yet read
        self._reading = 0  # bytes of the shard being read
        self._lock = threading.Lock()

    def plan(self, urls: Iterable[str]) -> None:
        """The reader will read `urls` next, in this order, after what it was told before."""
        with self._lock:
            self._planned.extend(urls)
            self._start()

    def local_copy(self, url: str) -> Path:
        """The shard the reader reads now, on disk: fetched ahead, or fetched now."""
        with self._lock:
            if url in self._planned:
                self._planned.remove(url)  # the first of it: the reader reads in the planned order
            fetched = self._fetched.pop(url, None)
            self._reading = self.settings.sizes.get(url, 0)
        try:
            return fetched.result() if fetched is not None else self.cache.local_copy(url, self._download)
        finally:
            with self._lock:
                self._start()

    def held(self) -> int:
        """Bytes of shards fetched or fetching and not yet read, with the one being read."""
        return self._reading + sum(self.settings.sizes.get(url, 0) for url in self._fetched)

    def close(self) -> None:
        self._shards.shutdown(wait=False, cancel_futures=True)
        self._parts.shutdown(wait=False, cancel_futures=True)

    def _start(self) -> None:
        """Start fetching the next planned shards while they fit in number and budget (lock held)."""
        held = self.held()
        for url in self._planned:
            if len(self._fetched) >= self.settings.ahead:
                return
            if url in self._fetched:
                continue
            size = self.settings.sizes.get(url, 0)
            if held + size > self.settings.budget:
                return
            self._fetched[url] = self._shards.submit(self.cache.local_copy, url, self._download)
            held += size


def fetch_settings(cfg: DataConfig, manifest: Manifest, sources: int = 1) -> FetchSettings:
    """How each DataLoader worker of this rank fetches ahead from one of `sources` shard sets: its
    share of the cache is the cache's limit over the node's fetchers (its ranks, LOCAL_WORLD_SIZE,
    times their workers, times the sources each worker reads)."""
    fetchers = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) * max(1, cfg.num_workers) * sources
    return FetchSettings(
        ahead=cfg.fetch_ahead,
        requests=cfg.fetch_requests,
        part_bytes=int(cfg.fetch_part_mb * 2**20),
        budget=int(cfg.cache_gb * 1e9) // fetchers,
        sizes=dict(zip(manifest.shard_urls(), (shard.bytes for shard in manifest.shards), strict=True)),
    )
