"""Files at a location, local or in a bucket: read (whole, streamed, ranged), write an object whole
(staged locally, then uploaded), remove, copy between here and a bucket, fingerprint."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from concurrent import futures
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

from pyarrow import fs

from vidtx.files import temporary_path
from vidtx.files import write_text as write_local_text
from vidtx.locations import Location
from vidtx.storage.client import StorageError, describe, endpoint, filesystem
from vidtx.storage.paths import is_remote, name_of
from vidtx.storage.stat import size

STREAM_CHUNK = 8 << 20  # bytes per request of a stream read from a bucket
# Ranges of one object read from a bucket less than this apart are read as one span: 64 KiB take about
# 1 ms at 0.5 Gbit/s, less than a request's latency (10-50 ms) and about two 256-px JPEG frames, so a
# clip of frames 1 or 2 apart is one request at most 2x its bytes, and one of frames far apart is one
# request per frame.
RANGE_SLACK = 64 << 10
RANGE_REQUESTS = 16  # ranged GETs in flight per process for the spans of ranged reads


@functools.cache
def _scratch() -> Path:
    """This process's folder for uploads being staged and downloads, `$TMPDIR/vidtx-scratch/<pid>`.
    A process killed mid-upload cannot remove its own: the folders of processes that no longer run
    are removed when the next process makes its own."""
    root = Path(tempfile.gettempdir()) / "vidtx-scratch"
    for folder in root.glob("*"):
        if folder.name.isdigit() and not _running(int(folder.name)):
            shutil.rmtree(folder, ignore_errors=True)
    mine = root / str(os.getpid())
    mine.mkdir(parents=True, exist_ok=True)
    return mine


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def no_such_object(where: Location) -> FileNotFoundError:
    """The error of a missing object, as the OS's for a missing file (`strerror` is the reason)."""
    return FileNotFoundError(errno.ENOENT, "no such object", str(where))


def download(where: Location, local: Path) -> None:
    """Copy the object at `where` into the file `local`, streamed in 8 MiB requests."""
    with open_input(where) as stream, local.open("wb") as out:
        try:
            shutil.copyfileobj(stream, out, STREAM_CHUNK)
        except OSError as err:
            raise StorageError(describe(where, err)) from None


def download_in_parts(where: str, local: Path, size: int, part_bytes: int, pool: Executor) -> None:
    """Copy the object at `where` (`size` bytes) into the file `local` with ranged GETs of `part_bytes`,
    as many at once as `pool` runs: a bucket serves parallel ranges of one object, where one stream
    waits out each request's latency in turn."""
    with local.open("wb") as out:
        out.truncate(size)

        def fetch(start: int) -> None:
            os.pwrite(out.fileno(), read_range(where, start, min(size, start + part_bytes)), start)

        parts = [pool.submit(fetch, start) for start in range(0, size, part_bytes)]
        futures.wait(parts)  # every part done with the file before it is closed, failed or not
        for part in parts:
            part.result()


@contextlib.contextmanager
def local_copy(where: Location) -> Iterator[Path]:
    """`where` as a file on this machine for the block: itself, or the object downloaded into a
    temporary folder that the block's end removes."""
    if not is_remote(where):
        yield Path(where)
        return
    with tempfile.TemporaryDirectory(prefix="download-", dir=_scratch()) as folder:
        local = Path(folder) / name_of(where)
        download(where, local)
        yield local


def read_bytes(where: Location) -> bytes:
    if not is_remote(where):
        return Path(where).read_bytes()
    client, path = filesystem(where)
    try:
        with client.open_input_stream(path) as stream:
            return stream.read()
    except FileNotFoundError:
        raise no_such_object(where) from None
    except OSError as err:
        raise StorageError(describe(where, err)) from None


def read_text(where: Location) -> str:
    return read_bytes(where).decode()


def write_text(where: Location, text: str) -> Location:
    """Write `text` complete or not at all (an object appears only once its upload is whole)."""
    if not is_remote(where):
        return write_local_text(Path(where), text)
    client, path = filesystem(where)
    try:
        with client.open_output_stream(path) as stream:
            stream.write(text.encode())
    except OSError as err:
        raise StorageError(describe(where, err)) from None
    return where


def upload(local: Path, where: Location) -> None:
    """Copy the finished file `local` to `where` as one object (a local `where`: a copy then rename);
    a folder `local` becomes one object per file below it, at the same relative names."""
    if not is_remote(where):
        destination = Path(where)
        destination.parent.mkdir(parents=True, exist_ok=True)
        if local.is_dir():
            shutil.copytree(local, destination, dirs_exist_ok=True)
        else:
            shutil.copyfile(local, destination)
        return
    client, path = filesystem(where)
    try:
        fs.copy_files(str(local), path, source_filesystem=fs.LocalFileSystem(), destination_filesystem=client)
    except OSError as err:
        raise StorageError(describe(where, err)) from None


@contextlib.contextmanager
def staged(where: Location) -> Iterator[Path]:
    """The local file to write `where` at: `where` itself on this machine (its folder made); for a
    bucket, a file of a temporary folder, uploaded as one object once the block ends without error
    (an object appears only when complete, so a reader never sees part of one)."""
    if not is_remote(where):
        Path(where).parent.mkdir(parents=True, exist_ok=True)
        yield Path(where)
        return
    with tempfile.TemporaryDirectory(prefix="upload-", dir=_scratch()) as folder:
        local = Path(folder) / name_of(where)
        yield local
        upload(local, where)


def delete(where: Location) -> None:
    """Remove the file at `where` if there is one."""
    if not is_remote(where):
        Path(where).unlink(missing_ok=True)
        return
    client, path = filesystem(where)
    try:
        client.delete_file(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        raise StorageError(describe(where, err)) from None


def open_input(where: Location) -> fs.NativeFile:
    """A file object that reads `where` front to back; from a bucket one ranged GET per 8 MiB
    (a read of pyarrow's S3 stream is a request of its own: tarfile's 10 KiB reads were one each)."""
    client, path = filesystem(where)
    try:
        return client.open_input_stream(path, buffer_size=STREAM_CHUNK if is_remote(where) else None)
    except FileNotFoundError:
        raise no_such_object(where) from None
    except OSError as err:
        raise StorageError(describe(where, err)) from None


@functools.lru_cache(maxsize=16)
def _opened(where: str, endpoint_url: str | None) -> fs.NativeFile:
    """A file of a bucket opened for ranged reads (a HEAD request), kept open for the next reads:
    a process reads many clips of few shards at a time."""
    client, path = filesystem(where)
    return client.open_input_file(path)


def read_range(where: str, start: int, end: int) -> bytes:
    """The bytes [start, end) of the object at `where` in a bucket: one ranged GET (and a HEAD when
    the process opens the object, once for its next reads). Local files are read with `os.pread`."""
    try:
        data = _opened(where, endpoint()).read_at(end - start, start)
    except OSError as err:
        raise StorageError(describe(where, err)) from None
    if len(data) != end - start:
        raise StorageError(f"{where}: {len(data)} bytes at {start}, not {end - start} (truncated)")
    return data


def merged_ranges(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The [start, end) spans that cover `ranges`, sorted, ranges less than `RANGE_SLACK` bytes apart in
    one span: reading a gap that small costs less than a request of its own."""
    spans: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if spans and start - spans[-1][1] < RANGE_SLACK:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


@functools.cache
def _range_pool() -> ThreadPoolExecutor:
    """This process's threads for the ranged GETs of one read (`RANGE_REQUESTS` of them in flight)."""
    return ThreadPoolExecutor(RANGE_REQUESTS, thread_name_prefix="vidtx-range")


def read_ranges(where: Location, offset: int, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
    """The bytes [offset + start, offset + end) of the file at `where` for each range: `pread`s of one
    open file here; in a bucket, one ranged GET per span of `merged_ranges`, all in flight at once (S3
    and GCS serve one range per request, and a request waits out the bucket's latency)."""
    if not is_remote(where):
        descriptor = os.open(where, os.O_RDONLY)
        try:
            return [os.pread(descriptor, end - start, offset + start) for start, end in ranges]
        finally:
            os.close(descriptor)
    spans = merged_ranges(ranges)
    _opened(str(where), endpoint())  # the object's HEAD once, before its ranges are read in parallel
    reads = [
        _range_pool().submit(read_range, str(where), offset + start, offset + end) for start, end in spans
    ]
    data = {span: read.result() for span, read in zip(spans, reads, strict=True)}
    out = []
    for start, end in ranges:
        first, last = next(span for span in spans if span[0] <= start and end <= span[1])
        out.append(data[(first, last)][start - first : end - first])
    return out


def sha256(where: Location) -> str:
    """The sha256 of a file, local or in a bucket (read front to back once, in small blocks)."""
    if not is_remote(where):
        with Path(where).open("rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()
    digest = hashlib.sha256()
    with open_input(where) as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def holds(where: Location, size_bytes: int, digest: str) -> bool:
    """Whether the file at `where` is the one of `size_bytes` and sha256 `digest`: both checked here; in
    a bucket the size alone (an object is only ever whole, and hashing it would download it)."""
    return size(where) == size_bytes and (is_remote(where) or sha256(where) == digest)


def make_folder(where: Location) -> None:
    """The folder `where` and its parents, made here; in a bucket nothing (a prefix needs no making)."""
    if not is_remote(where):
        Path(where).mkdir(parents=True, exist_ok=True)


def remove_partial(where: Location) -> None:
    """What a stopped write of `where` may have left: its temporary file here (`vidtx.files`); in a
    bucket nothing, since an upload appears whole or not at all."""
    if not is_remote(where):
        temporary_path(Path(where)).unlink(missing_ok=True)
