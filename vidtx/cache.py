"""A local cache of shards read from a bucket (`data.cache_dir`, at most `data.cache_gb`).

A tar is downloaded whole the first time a process reads it (or fetches it ahead:
`vidtx.data.fetch_ahead`), under a temporary name, checked against the object's size and renamed
into place (a reader never takes a part for a whole one). One process of the node fetches a tar
while the others that want it wait on its lock file and then find it cached. Later reads are local:
random access, `pread` of the sampled frames. A cached tar keeps its object's modification time as
its own (as `rsync -t` does), and is used only while the object's size and modification time are
still those: a shard rewritten in place, even with the same size, is fetched again. The time a tar
was last used is its access time: the least recently used tars are removed once the folder holds
more than its limit (the tar just fetched is never removed).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from vidtx import storage
from vidtx.config import DataConfig
from vidtx.storage import name_of

TEMPORARY_MARK = ".part-"
LOCK_SUFFIX = ".lock"  # beside each tar: held while one process of the node fetches it


Download = Callable[[str, Path, int], None]  # (url, local file, size): the object into the file


class LocalCopies(Protocol):
    """What a reader of shards in a bucket reads local copies through (`ShardCache`, `FetchAhead`)."""

    def local_copy(self, url: str) -> Path: ...


@dataclass(frozen=True)
class ShardCache:
    folder: Path
    max_bytes: int

    def local_copy(self, url: str, download: Download | None = None) -> Path:
        """The cached copy of the tar at `url`, fetched first (by `download`, or one stream) if it is
        missing or stale. Processes of a node that want the same tar at once fetch it once: the
        others wait for its lock, then find it cached."""
        state = storage.file_state(url)
        if state is None:
            raise FileNotFoundError(f"{url}: no such object")
        cached = self.folder / f"{hashlib.sha256(url.encode()).hexdigest()[:16]}-{name_of(url)}"
        if self._fresh(cached, state):
            return cached
        self.folder.mkdir(parents=True, exist_ok=True)
        with cached.with_name(cached.name + LOCK_SUFFIX).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            if self._fresh(cached, state):  # fetched by another process while this one waited
                return cached
            self._fetch(url, cached, state, download)
        self._evict(keep=cached)
        return cached

    def _fresh(self, cached: Path, state: storage.FileState) -> bool:
        """Whether `cached` is the object's copy as it is now; if so, it is marked used."""
        if not (cached.is_file() and storage.file_state(cached) == state):
            return False
        os.utime(cached, ns=(time.time_ns(), state[1]))  # used now
        return True

    def _fetch(self, url: str, cached: Path, state: storage.FileState, download: Download | None) -> None:
        size, modified_ns = state
        partial = cached.with_name(f"{cached.name}{TEMPORARY_MARK}{os.getpid()}-{threading.get_ident()}")
        try:
            if download is None:
                storage.download(url, partial)
            else:
                download(url, partial, size)
            if (fetched := partial.stat().st_size) != size:
                raise OSError(f"{url}: {fetched} of {size} bytes downloaded")
            os.utime(partial, ns=(time.time_ns(), modified_ns))
            os.replace(partial, cached)
        finally:
            partial.unlink(missing_ok=True)

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used tars until the folder is within its limit."""
        files = [f for f in self.folder.iterdir() if f.is_file() and is_cached_tar(f)]
        files.sort(key=lambda f: f.stat().st_atime_ns)
        total = sum(f.stat().st_size for f in files)
        for old in files:
            if total <= self.max_bytes:
                break
            if old != keep:
                total -= old.stat().st_size
                old.unlink(missing_ok=True)


def is_cached_tar(file: Path) -> bool:
    """A tar of the cache (not one being written, not a lock)."""
    return TEMPORARY_MARK not in file.name and not file.name.endswith(LOCK_SUFFIX)


def shard_cache(cfg: DataConfig) -> ShardCache | None:
    """The local cache of shards read from a bucket that `cfg` asks for (`data.cache_dir`)."""
    return ShardCache(cfg.cache_dir, int(cfg.cache_gb * 1e9)) if cfg.cache_dir is not None else None
