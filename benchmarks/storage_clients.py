"""Issue 29: which S3 client costs the least CPU per request and per byte read as vidtx reads shards
(a ranged GET per clip, of objects kept open): the check of `vidtx.storage`'s choice of pyarrow.fs.

Clients: pyarrow.fs as `vidtx.storage.filesystem` builds it (the baseline; `read_at` of files kept
open, as `storage.read_range`), obstore (Rust), s3fs (fsspec, aiobotocore) and boto3, with 5 s to
connect, 30 s per request and 8 tries where they take such options; a missing package is skipped.
Server: SeaweedFS on 127.0.0.1 (`benchmarks/local_bucket.py`), with 64 MiB of random bytes as 4
objects of 16 MiB and 200 objects of 1 KiB under a prefix.
Measured: ranged GETs of 256 KiB, 1 MiB and 8 MiB at random offsets (the same for every client), a
HEAD, a listing; for pyarrow and obstore, 1 MiB GETs N = 1, 2, 4, 8 at a time (N threads calling
pyarrow's `read_at`, which releases the GIL; N coroutines awaiting obstore's `get_range_async`). CPU
is this process's (`time.process_time`: the caller's and the client's own threads), not the server's,
which runs beside it on the same 2 cores; wall time too. First every client reads the same ranges,
checked byte for byte against the uploaded bytes, HEADs and lists: a warm-up, whose requests the
recorder in front of the server counts. The server answers in about a millisecond where a real
bucket's first byte takes tens of milliseconds of waiting: in-flight rates here are capped by the
server's and the recorder's CPU on the same 2 cores, and scale with the single-request wall time
(hiding latency L at R requests/s takes R x L).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import random
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from pathlib import Path

import boto3
from botocore.config import Config
from pyarrow import fs

from benchmarks.local_bucket import local_bucket
from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import Samples, interleaved, round_ratios
from infra.local.latency_proxy import requests
from vidtx import storage

log = logging.getLogger(__name__)

MIB = 1 << 20
BUCKET, PART, BIG, PREFIX, SMALL_OBJECTS = "bench", 16 * MIB, [f"big/{i}.bin" for i in range(4)], "small", 200
READS = {"GET 256 KiB": MIB // 4, "GET 1 MiB": MIB, "GET 8 MiB": 8 * MIB}
OPERATIONS = (*READS, "HEAD", "LIST 200")
PACKAGES = {"pyarrow.fs": "pyarrow", "obstore": "obstore", "s3fs": "s3fs", "boto3": "boto3"}
BASELINE, IN_FLIGHT = "pyarrow.fs", (1, 2, 4, 8)
# requests per measurement (a quarter with --quick): a few hundred ms of each
COUNTS = {"GET 256 KiB": 40, "GET 1 MiB": 24, "GET 8 MiB": 8, "HEAD": 40, "LIST 200": 8, "in flight": 48}
OPTIONS = {"connect_timeout": 5, "read_timeout": 30, "retries": {"mode": "standard", "total_max_attempts": 8}}
Range = tuple[str, int, int]  # (object, offset, length)


@dataclass(frozen=True)
class Client:
    """`read(object, offset, length)`: bytes or a buffer; `head()`: BIG[0]'s size; `listing()`: PREFIX's
    objects; `in_flight(ranges, n)`: the reads, `n` at a time (None: not measured)."""

    read: Callable[[str, int, int], object]
    head: Callable[[], int]
    listing: Callable[[], int]
    in_flight: Callable[[list[Range], int], object] | None = None


def pyarrow_client(endpoint: str) -> Client:
    client, bucket = storage.filesystem(f"s3://{BUCKET}")  # the endpoint from AWS_ENDPOINT_URL
    opened = {path: client.open_input_file(f"{bucket}/{path}") for path in BIG}  # a HEAD each, kept open

    def in_flight(ranges: list[Range], n: int) -> None:
        with ThreadPoolExecutor(n) as pool:
            deque(pool.map(lambda r: opened[r[0]].read_at(r[2], r[1]), ranges), maxlen=0)

    return Client(
        read=lambda path, at, size: opened[path].read_at(size, at),
        head=lambda: client.get_file_info(f"{bucket}/{BIG[0]}").size,
        listing=lambda: len(client.get_file_info(fs.FileSelector(f"{bucket}/{PREFIX}"))),
        in_flight=in_flight,
    )


def obstore_client(endpoint: str) -> Client:
    import obstore
    from obstore.store import S3Store

    options = {"allow_http": True, "connect_timeout": "5s", "timeout": "30s"}
    region, retries = os.environ["AWS_DEFAULT_REGION"], {"max_retries": 7}
    store = S3Store(BUCKET, endpoint=endpoint, region=region, client_options=options, retry_config=retries)

    async def in_flight(ranges: list[Range], n: int) -> None:
        async def reader(mine: list[Range]) -> None:
            for path, at, size in mine:
                await obstore.get_range_async(store, path, start=at, length=size)

        await asyncio.gather(*(reader(ranges[i::n]) for i in range(n)))

    return Client(
        read=lambda path, at, size: obstore.get_range(store, path, start=at, length=size),
        head=lambda: obstore.head(store, BIG[0])["size"],
        listing=lambda: len(obstore.list_with_delimiter(store, PREFIX)["objects"]),
        in_flight=lambda ranges, n: asyncio.run(in_flight(ranges, n)),  # a new loop: < 1 ms a batch
    )


def s3fs_client(endpoint: str) -> Client:
    import s3fs

    client = s3fs.S3FileSystem(
        endpoint_url=endpoint, config_kwargs=OPTIONS, use_listings_cache=False, skip_instance_cache=True
    )
    return Client(
        read=lambda path, at, size: client.cat_file(f"{BUCKET}/{path}", start=at, end=at + size),
        head=lambda: client.info(f"{BUCKET}/{BIG[0]}", refresh=True)["size"],
        listing=lambda: len(client.ls(f"{BUCKET}/{PREFIX}", refresh=True)),
    )


def boto3_client(endpoint: str) -> Client:
    client = boto3.client("s3", endpoint_url=endpoint, config=Config(**OPTIONS))

    def read(path: str, at: int, size: int) -> bytes:
        return client.get_object(Bucket=BUCKET, Key=path, Range=f"bytes={at}-{at + size - 1}")["Body"].read()

    return Client(
        read=read,
        head=lambda: client.head_object(Bucket=BUCKET, Key=BIG[0])["ContentLength"],
        listing=lambda: client.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/", Delimiter="/")["KeyCount"],
    )


FACTORIES = dict(zip(PACKAGES, (pyarrow_client, obstore_client, s3fs_client, boto3_client), strict=True))


def versions() -> dict[str, str | None]:
    """Each client's package version (None, logged, where missing); s3fs's with its botocore."""
    found = {name: version(pkg) if importlib.util.find_spec(pkg) else None for name, pkg in PACKAGES.items()}
    for name in (name for name, found_version in found.items() if not found_version):
        log.info("storage clients: %s skipped, not installed (pip install %s)", name, PACKAGES[name])
    if found["s3fs"]:
        found["s3fs"] += f" (aiobotocore {version('aiobotocore')}, botocore {version('botocore')})"
    return found


def verify(clients: dict[str, Client], objects: dict[str, bytes], reads: dict, log_file: Path) -> dict:
    """Check that every client reads the uploaded bytes of the same ranges, HEADs the object's size
    and lists the prefix's objects; returns the server's requests per call, by 'operation|client'."""
    made = {}
    for name, client in clients.items():
        for operation in OPERATIONS:
            mark, chosen = log_file.stat().st_size, reads.get(operation, [])[:4]
            if chosen:
                answers = [bytes(client.read(*r)) for r in chosen]
                expected = [objects[path][at : at + size] for path, at, size in chosen]
            else:
                answers = [client.head() if operation == "HEAD" else client.listing()]
                expected = [PART if operation == "HEAD" else SMALL_OBJECTS]
            if answers != expected:
                raise RuntimeError(f"{name}: its {operation} differs from the uploaded objects")
            made[f"{operation}|{name}"] = len(requests(log_file, mark)) / len(answers)
    return made


def measurements(clients: dict[str, Client], reads: dict, counts: dict[str, int], wall: dict) -> dict:
    """Each operation of each client ('N in flight' where it has `in_flight`), by 'operation|client' and
    operation-major (a round takes each operation's clients in turn): CPU seconds per request of a batch
    of them (their wall seconds per request appended to `wall`)."""

    def timed(key: str, batch: list[Callable[[], object]], made: int) -> Callable[[], float]:
        def measure() -> float:
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            for call in batch:
                call()
            cpu = time.process_time() - start_cpu
            wall.setdefault(key, []).append((time.perf_counter() - start_wall) / made)
            return cpu / made

        return measure

    found = {}
    for kind, n in (*((o, 0) for o in OPERATIONS), *((f"{n} in flight", n) for n in IN_FLIGHT)):
        for name, client in clients.items():
            key, count = f"{kind}|{name}", counts.get(kind, counts["in flight"])
            if kind in READS:
                found[key] = timed(key, [partial(client.read, *r) for r in reads[kind]], count)
            elif kind in OPERATIONS:
                found[key] = timed(key, [client.head if kind == "HEAD" else client.listing] * count, count)
            elif client.in_flight:
                found[key] = timed(key, [partial(client.in_flight, reads["in flight"], n)], count)
    return found


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    rounds, scale = (3, 4) if quick else (12, 1)
    counts = {operation: max(2, count // scale) for operation, count in COUNTS.items()}
    rng = random.Random(0)
    objects = {path: rng.randbytes(PART) for path in BIG}
    objects |= {f"{PREFIX}/{index:03}.bin": rng.randbytes(1024) for index in range(SMALL_OBJECTS)}
    reads = {  # the same random ranges for every client, each within one of the big objects
        read: [(rng.choice(BIG), rng.randrange(PART - size), size) for _ in range(counts[read])]
        for read, size in (*READS.items(), ("in flight", MIB))
    }
    found = versions()
    with (
        tempfile.TemporaryDirectory(prefix="vidtx-bench-clients-") as tmp,
        local_bucket(Path(tmp), BUCKET) as local,
    ):
        endpoint = os.environ["AWS_ENDPOINT_URL"]  # the recorder
        uploads = boto3.client("s3", endpoint_url=endpoint)
        for path, body in objects.items():
            uploads.put_object(Bucket=BUCKET, Key=path, Body=body)
        clients = {name: FACTORIES[name](endpoint) for name in PACKAGES if found[name]}
        made = verify(clients, objects, reads, local.log)
        wall: dict[str, list[float]] = {}
        cpu = interleaved(measurements(clients, reads, counts, wall), rounds)
    seconds = {key: Samples(tuple(values)) for key, values in wall.items()}
    tables, notes = report(cpu, seconds, found, made)
    return BenchmarkResult(
        name="storage_clients",
        title="S3 clients: CPU per request and per byte of vidtx's reads, and requests in flight",
        summary=" ".join(__doc__.split("\n\n", 1)[1].split())
        + f" Medians of {rounds} interleaved rounds; requests per measurement: {counts}.",
        inputs={"objects": {path: len(body) for path, body in objects.items()}, "requests": counts},
        tables=tables,
        raw={"versions": found, "cpu_s": cpu, "wall_s": seconds, "server_requests_per_call": made},
        notes=notes,
        quick=quick,
    )


def report(cpu: dict[str, Samples], wall: dict[str, Samples], found: dict, made: dict) -> tuple[list, list]:
    per_request, per_byte, in_flight = [], [], []
    for name, package in PACKAGES.items():
        if not found[name]:
            per_request.append([name, f"not installed (pip install {package})", *["-"] * len(OPERATIONS)])
            continue
        ms = {key: cpu[f"{key}|{name}"].median * 1e3 for key in OPERATIONS}
        ratios = {key: round_ratios(cpu[f"{key}|{name}"], cpu[f"{key}|{BASELINE}"]).median for key in ms}
        per_request.append([name, found[name], *(f"{fmt(ms[k] * 1e3)} ({fmt(ratios[k], 2)}x)" for k in ms)])
        per_mib = [ms[read] * MIB / size for read, size in READS.items()]
        latency = [wall[f"{key}|{name}"].median * 1e3 for key in ("GET 1 MiB", "HEAD")]
        per_byte.append([name, *map(fmt, [*per_mib, (ms["GET 8 MiB"] - ms["GET 1 MiB"]) / 7, *latency])])
        for n in IN_FLIGHT if f"1 in flight|{name}" in wall else ():
            single, many = wall[f"1 in flight|{name}"], wall[f"{n} in flight|{name}"]
            speedup, us = round_ratios(single, many).median, cpu[f"{n} in flight|{name}"].median * 1e6
            in_flight.append([name, str(n), fmt(1 / many.median), fmt(speedup, 2), fmt(us)])
    tables = [
        Table(
            f"CPU of this process per request, µs (÷ {BASELINE}: the median of the rounds' ratios)",
            ["client", "version", *OPERATIONS],
            per_request,
        ),
        Table(
            "CPU per MiB read, one request at a time, and wall time per request",
            ["client", *(f"ms/MiB {r[4:]}" for r in READS), "8 less 1 MiB", "wall ms 1 MiB", "HEAD"],
            per_byte,
        ),
        Table(
            "1 MiB GETs from one process with N in flight (pyarrow: N threads; obstore: N coroutines)",
            ["client", "N in flight", "requests/s (= MiB/s)", "÷ N = 1", "CPU µs / request"],
            in_flight,
        ),
    ]
    names, lines = [name for name in PACKAGES if found[name]], []
    for operation, what in (("GET 256 KiB", "per request"), ("GET 8 MiB", "per MiB")):
        best = min(names, key=lambda name: cpu[f"{operation}|{name}"].median)
        ratios = round_ratios(cpu[f"{operation}|{best}"], cpu[f"{operation}|{BASELINE}"])
        lines.append(
            f"Least CPU {what} ({operation}): {best}, {fmt(ratios.median, 2)}x {BASELINE}'s (the middle "
            f"half of the rounds' ratios: {'-'.join(fmt(q, 2) for q in ratios.quartiles)}x)."
        )
    for name in names:
        if rates := {n: 1 / wall[key].median for n in IN_FLIGHT if (key := f"{n} in flight|{name}") in wall}:
            enough = min(n for n, rate in rates.items() if rate >= 0.9 * max(rates.values()))
            lines.append(
                f"{name}: at most {fmt(max(rates.values()))} 1 MiB GETs/s here, 90% of it with {enough} in "
                f"flight (one alone: {fmt(wall[f'1 in flight|{name}'].median * 1e3)} ms wall); its own CPU "
                f"would allow {fmt(1 / cpu[f'GET 1 MiB|{name}'].median)} a second per core."
            )
    other = {call: count for call, count in made.items() if count != 1} or "none"
    lines.append(f"Every client read the uploaded bytes of the ranges; calls not of 1 request: {other}.")
    return tables, lines


if __name__ == "__main__":
    from benchmarks.run import main

    raise SystemExit(main([Path(__file__).stem, *sys.argv[1:]]))
