"""The one client of locations in a bucket: pyarrow's S3 (or GCS) file system, opened once per
process and endpoint, and the one-line errors of what it cannot do."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from pyarrow import fs

from vidtx.locations import Location
from vidtx.storage.paths import bucket_of, is_remote


class StorageError(OSError):
    """A remote location cannot be used: unreachable endpoint, missing bucket, refused credentials."""


def endpoint() -> str | None:
    """The S3 endpoint from the environment (None: AWS itself)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def configure(endpoint_url: str | None, region: str | None) -> None:
    """Make a config's endpoint and region (`storage.*`; None: keep the environment's) this process's,
    and those of every process it starts (shard writers, Ray workers read the same variables)."""
    if endpoint_url:
        os.environ["AWS_ENDPOINT_URL_S3"] = endpoint_url
    if region:
        os.environ["AWS_DEFAULT_REGION"] = region


RETRY_ATTEMPTS = 10  # retries of one S3 request before its error is raised: 51 s of waits (below)
CHECK_ATTEMPTS = 2  # retries of the start-up check: an unreachable endpoint is told at once, not in a minute


@functools.cache
def bucket_filesystem(
    scheme: str, endpoint_url: str | None, region: str | None, attempts: int = RETRY_ATTEMPTS
) -> fs.FileSystem:
    if scheme == "gs":
        return fs.GcsFileSystem()
    # The AWS SDK checks a CRC32 of each response body by default: about 0.8 ms of CPU per MiB here
    # (0.6x the CPU of an 8 MiB ranged read without it), and a ranged read has no checksum to check
    # (S3's are of whole objects). As boto3 reads the same variable, a user may still choose it.
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
    options: dict[str, object] = {"region": region or "us-east-1"}
    if endpoint_url:
        parts = urlsplit(endpoint_url)
        options |= {"endpoint_override": parts.netloc or parts.path, "scheme": parts.scheme or "https"}
    # Transient errors (5xx, throttling, a reset or refused connection) are retried by the AWS SDK after
    # 50 ms, 100 ms, ... doubling (its default strategy: no jitter, so the wait is known): 10 retries
    # span 51 s, so a store down for that long (a gateway restarted, a store killed and restarted: the
    # fault tests stop one for 20 s) costs the training only the wait, where the standard strategy's
    # random backoff gave up after 39-64 s. A request waits up to 30 s for an answer.
    return fs.S3FileSystem(
        **options,
        connect_timeout=5,
        request_timeout=30,
        retry_strategy=fs.AwsDefaultS3RetryStrategy(max_attempts=attempts),
    )


def filesystem(where: Location, attempts: int = RETRY_ATTEMPTS) -> tuple[fs.FileSystem, str]:
    """The pyarrow file system of a location and the path within it (`bucket/key` for a bucket),
    whose requests are tried up to `attempts` times."""
    if not is_remote(where):
        return fs.LocalFileSystem(), str(Path(where).absolute())
    scheme, path = bucket_path(where)
    return bucket_filesystem(scheme, endpoint(), os.environ.get("AWS_DEFAULT_REGION"), attempts), path


def bucket_path(where: Location) -> tuple[str, str]:
    """A bucket's URL as its scheme and `bucket/key` (the path its file system takes)."""
    scheme, _, path = str(where).partition("://")
    return scheme, path.rstrip("/")


def file_info(where: Location, named: Location | None = None, attempts: int = RETRY_ATTEMPTS) -> fs.FileInfo:
    """The client's FileInfo of `where`; an error is one line naming `named` (default: `where`)."""
    client, path = filesystem(where, attempts)
    try:
        return client.get_file_info(path)
    except OSError as err:
        raise StorageError(describe(named or where, err)) from None


def check(where: Location) -> None:
    """Fail at once, with one line naming `where`, when its bucket cannot be used: the endpoint is
    unreachable, the credentials are refused, or the bucket does not exist. Local: nothing to do."""
    if not is_remote(where):
        return
    scheme, bucket = bucket_of(str(where))
    if file_info(f"{scheme}://{bucket}", named=where, attempts=CHECK_ATTEMPTS).type == fs.FileType.NotFound:
        raise StorageError(f"{where}: no bucket {bucket!r} at {endpoint() or 'the default endpoint'}")


def check_buckets(locations: Iterable[Location]) -> None:
    """`check` once per bucket that any of `locations` is in (none for local ones)."""
    for where in {bucket_of(where): where for where in locations if is_remote(where)}.values():
        check(where)


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
