"""Reading shard members with random access, for the webdataset pipelines of the loaders.

webdataset reads tars as streams (`tarfile` in "r|" mode, 10 KiB at a time): every byte of every
member passes through Python, about 0.3 GB/s in the loader here, which a frames-store sample of a
10-s video (several MB of JPEGs, of which a clip decodes 8 or 16) cannot afford. Shards are files,
so this stage opens them with `tarfile` in random-access mode: a member is read with one read, and
the frames member is not read at all but handed on as a `MemberRange` (its file, offset and size),
from which a clip reads only its frames. The members then go through webdataset's own
`group_by_keys` into samples, as with `webdataset.tarfile_to_samples`.

A shard in a bucket (`s3://`, `gs://`) read without the node cache: a frames-store tar is not
opened at all. Its `MemberIndex` (`<name>.index.json`, one request per shard, read `INDEX_AHEAD`
shards ahead in threads so that a shard of few samples does not wait on it) gives each sample's key,
json and frames range, and a clip reads only its frames' bytes (`vidtx.storage.read_ranges`). A
video-store tar is streamed with one request and read as a stream, and so is a frames tar written
before shards had an index: it reads, with one warning per split and process naming `vidtx index`,
which adds the index.
"""

from __future__ import annotations

import contextlib
import logging
import tarfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import webdataset as wds

from vidtx import storage
from vidtx.cache import LocalCopies
from vidtx.manifest import FRAMES_MEMBER, MemberIndex, index_name
from vidtx.media.decode import VideoDecodeError
from vidtx.storage import join, name_of, parent_of

log = logging.getLogger(__name__)

INDEX_AHEAD = 4  # shards of a bucket whose `MemberIndex` is read ahead of the one being read
_warned_splits: set[str] = set()  # splits whose frames tars without an index this process warned of


@dataclass(frozen=True)
class MemberRange:
    """A tar member left unread: `size` bytes at `offset` of the file at `path`."""

    path: str
    offset: int
    size: int

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes [start, end) of the member for each range (`vidtx.storage.read_ranges`: from one
        open file, or in a bucket one request per span of near ranges, all in flight at once); a read
        that fails is a `VideoDecodeError`, and the sample is skipped."""
        try:
            return storage.read_ranges(self.path, self.offset, ranges)
        except OSError as err:
            raise VideoDecodeError(f"frames not read: {err}") from err


def _members(
    url: str, cache: LocalCopies | None = None, index: Future[MemberIndex | None] | None = None
) -> Iterator[dict[str, Any]]:
    """{"fname", "data", "__url__"} for each regular member of the tar at `url`, then {} (end of tar);
    a tar in a bucket is read from its copy in `cache` when one is given, else through its
    `MemberIndex` (`index`: its read, started ahead) when it has one.

    A sample's members are held back until the next sample begins or the tar ends, so that a read
    error drops the sample it cut short (it may miss members) rather than pass on a part of it."""
    local = storage.local_path(url)
    if local is None and cache is not None:
        local = cache.local_copy(url)
    if local is None and (found := index.result() if index else _member_index(url)) is not None:
        for indexed in found.samples:
            offset, size = indexed.frames
            yield {"fname": f"{indexed.key}.json", "data": indexed.meta.encode(), "__url__": url}
            yield {
                "fname": f"{indexed.key}.{FRAMES_MEMBER}",
                "data": MemberRange(url, offset, size),
                "__url__": url,
            }
        yield {}
        return
    sample: list[dict[str, Any]] = []  # the members read so far of the sample being read
    with _open_tar(url, local) as archive:
        for info in archive:
            if not info.isreg():
                continue
            if sample and _key(info.name) != _key(sample[0]["fname"]):
                yield from sample
                sample = []
            frames = info.name.partition(".")[2] == FRAMES_MEMBER
            if frames and local is not None:
                data: bytes | MemberRange = MemberRange(str(local), info.offset_data, info.size)
            else:
                if frames:
                    _warn_no_index(url)
                data = archive.extractfile(info).read()  # type: ignore[union-attr]
                if len(data) != info.size:
                    raise tarfile.ReadError(f"{info.name}: unexpected end of data")
            sample.append({"fname": info.name, "data": data, "__url__": url})
    yield from sample
    yield {}


def _warn_no_index(url: str) -> None:
    """Warn, once per split, that a frames tar of a bucket is read whole for want of its index."""
    split = name_of(url).rsplit("-", 1)[0]
    if split not in _warned_splits:
        _warned_splits.add(split)
        log.warning(
            "%s: a frames-store tar without its index (%s) is read whole, not just the frames a clip "
            "uses; `vidtx index %s` adds the indexes of the split's tars",
            url,
            index_name(name_of(url)),
            parent_of(url),
        )


def _member_index(url: str) -> MemberIndex | None:
    """The `MemberIndex` beside a tar in a bucket; None when there is none (a video-store tar)."""
    try:
        return MemberIndex.model_validate_json(
            storage.read_bytes(join(parent_of(url), index_name(name_of(url))))
        )
    except FileNotFoundError:
        return None


def _indexed_ahead(
    sources: Iterable[dict[str, Any]], pool: ThreadPoolExecutor
) -> Iterator[tuple[str, Future[MemberIndex | None] | None]]:
    """Each url of `sources` with the read of its `MemberIndex`, started `INDEX_AHEAD` urls before its
    turn in `pool` (None for a local url)."""
    window: deque[tuple[str, Future[MemberIndex | None] | None]] = deque()
    for source in sources:
        url = source["url"]
        window.append((url, pool.submit(_member_index, url) if storage.local_path(url) is None else None))
        if len(window) > INDEX_AHEAD:
            yield window.popleft()
    yield from window


@contextlib.contextmanager
def _open_tar(url: str, local: Path | None) -> Iterator[tarfile.TarFile]:
    """The tar's file on this machine (`local`) opened for random access; else the tar at `url` as a
    stream of one request."""
    if local is not None:
        with tarfile.open(local, "r:") as archive:
            yield archive
        return
    with storage.open_input(url) as stream, tarfile.open(fileobj=stream, mode="r|") as archive:
        yield archive


def _key(name: str) -> str:
    """The sample a member belongs to, as `group_by_keys` groups them."""
    return wds.tariterators.base_plus_ext(name)[0]


def tar_members(
    sources: Iterable[dict[str, Any]], handler: Callable[[Exception], bool], cache: LocalCopies | None = None
) -> Iterator[dict[str, Any]]:
    """The members of every shard in `sources` ({"url": path} dicts, as webdataset's shard lists give
    them); an unreadable tar, or its unreadable end, goes to `handler` (True: go on with the next)."""
    if cache is not None:
        urls: Iterable[tuple[str, Future[MemberIndex | None] | None]] = ((s["url"], None) for s in sources)
        pool = None
    else:
        pool = ThreadPoolExecutor(INDEX_AHEAD, thread_name_prefix="vidtx-index")
        urls = _indexed_ahead(sources, pool)
    try:
        for url, index in urls:
            try:
                yield from _members(url, cache, index)
            except (tarfile.TarError, OSError, EOFError) as err:
                err.args = (*err.args, url)
                if not handler(err):
                    return
                yield {}  # what was read of the tar ends there
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def tar_samples(
    sources: Iterable[dict[str, Any]], handler: Callable[[Exception], bool], cache: LocalCopies | None = None
) -> Iterator[dict[str, Any]]:
    """Pipeline stage: shard urls -> samples ({"__key__", "__url__", "json", "mp4" or "frames", ...}).
    Use it as `functools.partial(tar_samples, handler=...)` (picklable for DataLoader workers)."""
    return wds.tariterators.group_by_keys(tar_members(sources, handler, cache), handler=handler)
