"""What limits a frames-store clip read from a bucket, for `benchmarks.bucket_latency`: the loader's
own ranged GETs (the spans one epoch asked for) made again from this process, N in flight, through
the latency proxy, by vidtx's client and by another.

Clients: pyarrow.fs as vidtx reads ranges (`vidtx.storage.objects.read_range`: the AWS SDK for C++,
files kept open) and obstore (Rust's object_store; skipped, and said, where it is not installed), each
called from N threads as `vidtx.storage.read_ranges` calls pyarrow (`RANGE_REQUESTS` of them: 16), and
from 64. Measured: this process's CPU per GET (`time.process_time`: every thread, the clients' own
included), GETs per second, and the CPU the server's processes (SeaweedFS and the proxies, on their
own core) spent meanwhile. Every client's bytes are checked against pyarrow's first.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from importlib.metadata import version

from benchmarks.timing import Samples, interleaved
from vidtx.storage import objects

Span = tuple[str, int, int]  # (s3://bucket/key, start, end)
IN_FLIGHT = (objects.RANGE_REQUESTS, 64)
VIDTX = "pyarrow.fs (vidtx)"
read_range = objects.read_range  # the real one, whatever a benchmark has patched in since


def pyarrow_reader(endpoint: str) -> Callable[[Span], bytes]:
    """vidtx's own read of a span (the endpoint comes from AWS_ENDPOINT_URL, which the caller sets)."""
    return lambda span: read_range(*span)


def obstore_reader(endpoint: str) -> Callable[[Span], bytes]:
    import obstore
    from obstore.store import S3Store

    stores: dict[str, S3Store] = {}

    def read(span: Span) -> bytes:
        bucket, key = span[0].removeprefix("s3://").split("/", 1)
        if bucket not in stores:  # keys and region from the environment's AWS_* (local_bucket's)
            stores[bucket] = S3Store(bucket, endpoint=endpoint, client_options={"allow_http": True})
        return bytes(obstore.get_range(stores[bucket], key, start=span[1], end=span[2]))

    return read


def clients(endpoint: str) -> tuple[dict[str, Callable[[Span], bytes]], dict[str, str | None]]:
    """The readers there are, and every client's version (None: not installed)."""
    found = {VIDTX: version("pyarrow"), "obstore": None}
    if importlib.util.find_spec("obstore"):
        found["obstore"] = version("obstore")
    readers = {VIDTX: pyarrow_reader(endpoint)}
    if found["obstore"]:
        readers["obstore"] = obstore_reader(endpoint)
    return readers, found


def measure(
    spans: list[Span], endpoint: str, server_cpu: Callable[[], float], rounds: int
) -> tuple[dict[str, dict], dict[str, str | None]]:
    """By 'client|N': CPU and wall seconds per GET (Samples), the server's CPU seconds per GET and its
    core's busy fraction (last round); and the clients' versions. The caller points AWS_ENDPOINT_URL at
    `endpoint` for vidtx's client."""
    readers, found = clients(endpoint)
    expected = [read_range(*span) for span in spans[:8]]
    for name, read in readers.items():
        if [read(span) for span in spans[:8]] != expected:
            raise RuntimeError(f"{name}: its ranged GETs differ from pyarrow's")
    pools = {n: ThreadPoolExecutor(n, thread_name_prefix="bench-range") for n in IN_FLIGHT}
    wall: dict[str, list[float]] = {}
    server: dict[str, dict[str, float]] = {}

    def timed(key: str, read: Callable[[Span], bytes], n: int) -> float:
        list(pools[n].map(read, spans[:n]))  # every thread's connection open
        start_wall, start_cpu, start_server = time.perf_counter(), time.process_time(), server_cpu()
        for _ in pools[n].map(read, spans):
            pass
        cpu, seconds = time.process_time() - start_cpu, time.perf_counter() - start_wall
        used = server_cpu() - start_server
        wall.setdefault(key, []).append(seconds / len(spans))
        server[key] = {"server_cpu_per_get": used / len(spans), "server_busy": used / seconds}
        return cpu / len(spans)

    try:
        cpu = interleaved(
            {
                f"{name}|{n}": partial(timed, f"{name}|{n}", read, n)
                for n in IN_FLIGHT
                for name, read in readers.items()
            },
            rounds,
        )
    finally:
        for pool in pools.values():
            pool.shutdown()
    return {
        key: {"cpu_per_get": cpu[key], "wall_per_get": Samples(tuple(wall[key])), **server[key]}
        for key in cpu
    }, found
