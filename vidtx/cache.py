"""A local cache of shards read from a bucket (`data.cache_dir`, at most `data.cache_gb`).

A tar is downloaded whole the first time a process reads it, under a temporary name, checked against
the object's size and renamed into place (a reader never takes a part for a whole one; processes that
fetch the same tar at once each write their own temporary file, and the last rename wins with the same
bytes). Later reads are local: random access, `pread` of the sampled frames. A cached tar keeps its
object's modification time as its own (as `rsync -t` does), and is used only while the object's size
and modification time are still those: a shard rewritten in place, even with the same size, is
fetched again. The time a tar was last used is its access time: the least recently used tars are
removed once the folder holds more than its limit (the tar just fetched is never removed).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from vidtx import storage
from vidtx.locations import name_of

TEMPORARY_MARK = ".part-"


@dataclass(frozen=True)
class ShardCache:
    folder: Path
    max_bytes: int

    def local_copy(self, url: str) -> Path:
        """The cached copy of the tar at `url`, fetched first if it is missing or stale."""
        state = storage.file_state(url)
        if state is None:
            raise FileNotFoundError(f"{url}: no such object")
        size, modified_ns = state
        cached = self.folder / f"{hashlib.sha256(url.encode()).hexdigest()[:16]}-{name_of(url)}"
        if cached.is_file() and storage.file_state(cached) == state:
            os.utime(cached, ns=(time.time_ns(), modified_ns))  # used now
            return cached
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f"{cached.name}{TEMPORARY_MARK}{os.getpid()}")
        try:
            storage.download(url, partial)
            if (fetched := partial.stat().st_size) != size:
                raise OSError(f"{url}: {fetched} of {size} bytes downloaded")
            os.utime(partial, ns=(time.time_ns(), modified_ns))
            os.replace(partial, cached)
        finally:
            partial.unlink(missing_ok=True)
        self._evict(keep=cached)
        return cached

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used tars until the folder is within its limit."""
        files = [f for f in self.folder.iterdir() if f.is_file() and TEMPORARY_MARK not in f.name]
        files.sort(key=lambda f: f.stat().st_atime_ns)
        total = sum(f.stat().st_size for f in files)
        for old in files:
            if total <= self.max_bytes:
                break
            if old != keep:
                total -= old.stat().st_size
                old.unlink(missing_ok=True)
