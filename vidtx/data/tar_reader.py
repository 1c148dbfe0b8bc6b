"""Reading shard members with random access, for the webdataset pipelines of the loaders.

webdataset reads tars as streams (`tarfile` in "r|" mode, 10 KiB at a time): every byte of every
member passes through Python, about 0.3 GB/s in the loader here, which a frames-store sample of a
10-s video (several MB of JPEGs, of which a clip decodes 8 or 16) cannot afford. Shards are files,
so this stage opens them with `tarfile` in random-access mode: a member is read with one read, and
the frames member is not read at all but handed on as a `MemberRange` (its file, offset and size),
from which a clip reads only its frames. The members then go through webdataset's own
`group_by_keys` into samples, as with `webdataset.tarfile_to_samples`.

A shard in a bucket (`s3://`, `gs://`): a frames-store tar is not opened at all. Its `MemberIndex`
(`<name>.index.json`, one request per shard) gives each sample's key, json and frames range, and a
clip's frames are one ranged request (first to last sampled frame). A video-store tar (or a frames
tar without an index) is streamed with one request and read as a stream.
"""

from __future__ import annotations

import contextlib
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import webdataset as wds

from vidtx import storage
from vidtx.cache import LocalCopies
from vidtx.manifest import FRAMES_MEMBER, MemberIndex, index_name
from vidtx.media.decode import VideoDecodeError
from vidtx.storage import join, name_of, parent_of


@dataclass(frozen=True)
class MemberRange:
    """A tar member left unread: `size` bytes at `offset` of the file at `path`."""

    path: str
    offset: int
    size: int

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes [start, end) of the member for each range (`vidtx.storage.read_ranges`: from one
        open file, or one request in a bucket); a read that fails is a `VideoDecodeError`, and the
        sample is skipped."""
        try:
            return storage.read_ranges(self.path, self.offset, ranges)
        except OSError as err:
            raise VideoDecodeError(f"frames not read: {err}") from err


def _members(url: str, cache: LocalCopies | None = None) -> Iterator[dict[str, Any]]:
    """{"fname", "data", "__url__"} for each regular member of the tar at `url`, then {} (end of tar);
    a tar in a bucket is read from its copy in `cache` when one is given.

    A sample's members are held back until the next sample begins or the tar ends, so that a read
    error drops the sample it cut short (it may miss members) rather than pass on a part of it."""
    local = storage.local_path(url)
    if local is None and cache is not None:
        local = cache.local_copy(url)
    if local is None and (index := _member_index(url)) is not None:
        for indexed in index.samples:
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
            if info.name.partition(".")[2] == FRAMES_MEMBER and local is not None:
                data: bytes | MemberRange = MemberRange(str(local), info.offset_data, info.size)
            else:
                data = archive.extractfile(info).read()  # type: ignore[union-attr]
                if len(data) != info.size:
                    raise tarfile.ReadError(f"{info.name}: unexpected end of data")
            sample.append({"fname": info.name, "data": data, "__url__": url})
    yield from sample
    yield {}


def _member_index(url: str) -> MemberIndex | None:
    """The `MemberIndex` beside a tar in a bucket; None when there is none (a video-store tar)."""
    try:
        return MemberIndex.model_validate_json(
            storage.read_bytes(join(parent_of(url), index_name(name_of(url))))
        )
    except FileNotFoundError:
        return None


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
    for source in sources:
        url = source["url"]
        try:
            yield from _members(url, cache)
        except (tarfile.TarError, OSError, EOFError) as err:
            err.args = (*err.args, url)
            if not handler(err):
                return
            yield {}  # what was read of the tar ends there


def tar_samples(
    sources: Iterable[dict[str, Any]], handler: Callable[[Exception], bool], cache: LocalCopies | None = None
) -> Iterator[dict[str, Any]]:
    """Pipeline stage: shard urls -> samples ({"__key__", "__url__", "json", "mp4" or "frames", ...}).
    Use it as `functools.partial(tar_samples, handler=...)` (picklable for DataLoader workers)."""
    return wds.tariterators.group_by_keys(tar_members(sources, handler, cache), handler=handler)
