"""Where shards, sources and checkpoints live: a local path, `file://`, `s3://` or `gs://`, and the one
client that reaches them.

Locations are parsed by `vidtx.locations` (a `Path` on this machine, a URL string in a bucket); every
module reads and writes them through the functions here, so no other module builds a client. Local
locations keep their plain file operations.

The client is pyarrow's file systems: Ray Train keeps checkpoints through one already, its S3 client
(the AWS SDK for C++) reads byte ranges (`read_at`) without holding the GIL, and it is installed with
Ray. Endpoint, region and credentials come from the environment as boto3 reads them
(`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, `AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`); the endpoint and region are also passed explicitly, so a client that does
not read the variables gets them too. No message here ever holds a credential.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from pyarrow import fs

from vidtx.files import write_text as write_local_text
from vidtx.locations import Location, bucket_of, is_remote, name_of


class StorageError(OSError):
    """A remote location cannot be used: unreachable endpoint, missing bucket, refused credentials."""


def endpoint() -> str | None:
    """The S3 endpoint from the environment (None: AWS itself)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


RETRY_ATTEMPTS = 8  # tries of one S3 request before its error is raised
CHECK_ATTEMPTS = 2  # tries of the start-up check: an unreachable endpoint is told in seconds, not a minute


@functools.cache
def _filesystem(
    scheme: str, endpoint_url: str | None, region: str | None, attempts: int = RETRY_ATTEMPTS
) -> fs.FileSystem:
    if scheme == "gs":
        return fs.GcsFileSystem()
    options: dict[str, object] = {"region": region or "us-east-1"}
    if endpoint_url:
        parts = urlsplit(endpoint_url)
        options |= {"endpoint_override": parts.netloc or parts.path, "scheme": parts.scheme or "https"}
    # Transient errors (5xx, throttling, a reset or refused connection) are retried by the AWS SDK with
    # exponential backoff (its standard strategy: up to 20 s between tries); a request waits up to
    # 30 s for an answer, so a server that pauses for a few seconds costs only that time.
    return fs.S3FileSystem(
        **options,
        connect_timeout=5,
        request_timeout=30,
        retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=attempts),
    )


def filesystem(where: Location, attempts: int = RETRY_ATTEMPTS) -> tuple[fs.FileSystem, str]:
    """The pyarrow file system of a location and the path within it (`bucket/key` for a bucket),
    whose requests are tried up to `attempts` times."""
    if not is_remote(where):
        return fs.LocalFileSystem(), str(Path(where).absolute())
    scheme, _, path = str(where).partition("://")
    return _filesystem(scheme, endpoint(), os.environ.get("AWS_DEFAULT_REGION"), attempts), path.rstrip("/")


def _info(where: Location, named: Location | None = None, attempts: int = RETRY_ATTEMPTS) -> fs.FileInfo:
    """The client's FileInfo of `where`; an error is one line naming `named` (default: `where`)."""
    client, path = filesystem(where, attempts)
    try:
        return client.get_file_info(path)
    except OSError as err:
        raise StorageError(describe(named or where, err)) from None


def exists(where: Location) -> bool:
    if not is_remote(where):
        return Path(where).exists()
    return _info(where).type != fs.FileType.NotFound


def is_file(where: Location) -> bool:
    if not is_remote(where):
        return Path(where).is_file()
    return _info(where).type == fs.FileType.File


def size(where: Location) -> int | None:
    """The size of the file at `where`, None when there is none."""
    if not is_remote(where):
        try:
            return Path(where).stat().st_size
        except OSError:
            return None
    info = _info(where)
    return info.size if info.type == fs.FileType.File else None


def names(folder: Location, suffix: str = "") -> list[str]:
    """The names of the files directly in `folder` that end with `suffix`, sorted."""
    if not is_remote(folder):
        return sorted(p.name for p in Path(folder).glob(f"*{suffix}") if p.is_file())
    client, path = filesystem(folder)
    try:
        infos = client.get_file_info(fs.FileSelector(path, allow_not_found=True))
    except OSError as err:
        raise StorageError(describe(folder, err)) from None
    return sorted(i.base_name for i in infos if i.type == fs.FileType.File and i.base_name.endswith(suffix))


def read_bytes(where: Location) -> bytes:
    if not is_remote(where):
        return Path(where).read_bytes()
    client, path = filesystem(where)
    try:
        with client.open_input_stream(path) as stream:
            return stream.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{where}: no such object") from None
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
    """Copy the finished file `local` to `where` as one object (a local `where`: a copy then rename)."""
    if not is_remote(where):
        destination = Path(where)
        destination.parent.mkdir(parents=True, exist_ok=True)
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
    with tempfile.TemporaryDirectory(prefix="vidtx-upload-") as folder:
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


STREAM_CHUNK = 8 << 20  # bytes per request of a stream read from a bucket


def open_input(where: Location) -> fs.NativeFile:
    """A file object that reads `where` front to back; from a bucket one ranged GET per 8 MiB
    (a read of pyarrow's S3 stream is a request of its own: tarfile's 10 KiB reads were one each)."""
    client, path = filesystem(where)
    try:
        return client.open_input_stream(path, buffer_size=STREAM_CHUNK if is_remote(where) else None)
    except FileNotFoundError:
        raise FileNotFoundError(f"{where}: no such object") from None
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


def check(where: Location) -> None:
    """Fail at once, with one line naming `where`, when its bucket cannot be used: the endpoint is
    unreachable, the credentials are refused, or the bucket does not exist. Local: nothing to do."""
    if not is_remote(where):
        return
    scheme, bucket = bucket_of(str(where))
    if _info(f"{scheme}://{bucket}", named=where, attempts=CHECK_ATTEMPTS).type == fs.FileType.NotFound:
        raise StorageError(f"{where}: no bucket {bucket!r} at {endpoint() or 'the default endpoint'}")


def describe(where: Location, err: OSError) -> str:
    """One line for an error of the client about `where`: what went wrong, never a credential."""
    text = str(err)
    at = endpoint() or "the default endpoint"
    if "NETWORK_CONNECTION" in text or "Could not connect" in text or "curlCode" in text:
        return f"{where}: cannot reach the storage endpoint {at}"
    if any(code in text for code in ("ACCESS_DENIED", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403")):
        return f"{where}: access denied at {at} (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
    if "NoSuchBucket" in text or "NO_SUCH_BUCKET" in text:
        return f"{where}: no such bucket at {at}"
    return f"{where}: {text.splitlines()[0]}"
