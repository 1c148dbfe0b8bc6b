"""Issues 47 and 61 (point 2): the training loader reading a bucket 20 and 50 ms away, cache cold, against local disk.

Data: the "10 s" videos of `benchmarks.data_loading` (synthetic 10-s 640x360 30-fps, Kinetics-like
length), sharded as `vidtx shard` does by default (up to 1,000 videos a shard: here one shard a
split) onto local disk as both stores, re-encoded video (short side 256) and frames (JPEG, short side
256), and the same shards uploaded to a bucket of SeaweedFS on 127.0.0.1 (`benchmarks/local_bucket.py`).
The bucket is read through `infra/local/latency_proxy.py`, which holds every request back 20 or 50 ms
(a cloud bucket's first-byte latency in its region), with a cold cache (`data.cache_dir` empty at the
start of each epoch): with fetch-ahead (the defaults of `data.fetch_ahead`, `fetch_requests`,
`fetch_part_mb`) and without (`data.fetch_ahead: 0`: each shard fetched when its read starts, as one
stream); and the frames store without a cache, where a clip reads only its frames (a ranged GET per
span of frames within `RANGE_SLACK` of each other, all in flight at once), with read-ahead
(`data.read_ahead`, its default of 2, and 8 and 16) and without. Loader: `build_train_loader` at
8x224, segment sampling, the default augmentation, a shuffle buffer of 2, in process (no DataLoader
worker, one thread), one epoch per measurement, after one untimed epoch of each store from disk and
from the bucket. Every thread of this process is pinned to one core; every thread of SeaweedFS's two
processes (store and gateway) and of the latency proxies to the other. CPU time is this process's
(`time.process_time`: the loader and its fetching threads); the server's (SeaweedFS and the proxies)
is measured apart, per clip, and as its core's busy share of the epoch's wall time: near 100%
(saturated), the test server, not the loader, is the limit. MB per clip is what came from the bucket
(whole tars into the cache, or the ranged GETs, with those read ahead past the epoch's end); "÷ frames"
divides it by the bytes of the JPEG frames each clip decodes (those the same clips read from disk).
The second table makes the loader's own ranged GETs again from this process (`benchmarks.range_clients`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path
from unittest import mock

from benchmarks import range_clients
from benchmarks.bucket_latency_report import CASES, DELAYS_MS, SLOWEST, STORES, notes, tables
from benchmarks.local_bucket import local_bucket
from benchmarks.object_storage import epoch
from benchmarks.results import BenchmarkResult
from benchmarks.timing import Samples, interleaved
from benchmarks.videos import shard_store, write_busy_videos, write_copies
from infra.local.latency_proxy import latency_proxy, requests
from infra.local.ports import free_port
from vidtx import storage
from vidtx.config import ShardConfig
from vidtx.manifest import load_manifest
from vidtx.storage import objects

log = logging.getLogger(__name__)

read_range, read_ranges = objects.read_range, storage.read_ranges  # as the benchmark wraps them

FRAMES = 8
SETTLE_S = 0.5  # after an epoch: the reads still in flight (read ahead past its end) land in the counts
SPANS = f"frames|{SLOWEST}, no cache"  # the epoch whose ranged GETs `range_clients` makes again


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    copies, rounds = (2, 1) if quick else (12, 5)
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-latency-") as tmp:
        work = Path(tmp)
        videos = write_copies(write_busy_videos(work / "distinct", 4), work / "busy" / "busy", copies)
        log.info("bucket latency: %d videos, sharded as vidtx shard does by default", len(videos))
        per_shard = ShardConfig.model_fields["max_samples_per_shard"].default
        with local_bucket(work, "bench") as local:
            shards = {}
            for store in STORES:
                disk = shard_store(
                    work / "busy", work / "shards" / store, store, max_samples_per_shard=per_shard
                )
                storage.upload(disk, f"{local.url}/{store}")
                shards[(store, "disk")], shards[(store, "bucket")] = disk, f"{local.url}/{store}"
            proxies = {delay: free_port() for delay in DELAYS_MS}
            seconds: dict[str, list[float]] = {}
            traffic: dict[str, dict[str, float]] = {}
            spans: list[range_clients.Span] = []

            def measure(store: str, case: str) -> float:
                """One epoch of `case` (one of CASES); its CPU s / clip."""
                counts = {"fetched": 0, "frames": 0, "frame_gets": 0}
                recorded: list[range_clients.Span] = []

                def fetched(where: str, start: int, end: int) -> bytes:
                    counts["fetched"] += end - start
                    recorded.append((where, start, end))
                    return read_range(where, start, end)

                def frames(
                    where: storage.Location, offset: int, ranges: list[tuple[int, int]]
                ) -> list[bytes]:
                    counts["frames"] += sum(end - start for start, end in ranges)
                    counts["frame_gets"] += len(objects.merged_ranges(ranges))
                    return read_ranges(where, offset, ranges)

                with (
                    mock.patch.object(objects, "read_range", fetched),
                    mock.patch.object(storage, "read_ranges", frames),
                ):
                    if case == "disk":
                        clips, wall, cpu = epoch(shards[(store, "disk")], shuffle_buffer=2)
                        traffic[f"{store}|{case}"] = {"frame_bytes": counts["frames"] / clips}
                    else:
                        clips, wall, cpu = bucket_epoch(store, case, counts)
                seconds.setdefault(f"{store}|{case}", []).append(wall / clips)
                if f"{store}|{case}" == SPANS:
                    spans[:] = [span for span in recorded if storage.is_remote(span[0])]
                return cpu / clips

            def bucket_epoch(store: str, case: str, counts: dict[str, int]) -> tuple[int, float, float]:
                delay = int(case.split()[0])
                cache = None if "no cache" in case else work / "cache" / store
                settings = {"fetch_ahead": 0} if "no fetch-ahead" in case else {}
                settings |= {"read_ahead": 0} if "no read-ahead" in case else {}
                settings |= {"read_ahead": int(case.split()[-1])} if "read-ahead " in case else {}
                if cache is not None:
                    shutil.rmtree(cache, ignore_errors=True)  # cold
                mark, server_cpu = local.log.stat().st_size, local.server_cpu()
                proxied = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxies[delay]}"}
                with mock.patch.dict(os.environ, proxied):
                    clips, wall, cpu = epoch(
                        shards[(store, "bucket")], shuffle_buffer=2, cache_dir=cache, **settings
                    )
                used = local.server_cpu() - server_cpu
                time.sleep(SETTLE_S)
                downloaded = (
                    counts["fetched"]
                    if cache is None
                    else sum(f.stat().st_size for f in cache.iterdir() if f.suffix == ".tar")
                )
                traffic[f"{store}|{case}"] = {
                    "requests": len(requests(local.log, mark)) / clips,
                    "frame_gets": counts["frame_gets"] / clips,
                    "bytes": downloaded / clips,
                    "server_cpu": used / clips,
                    "server_busy": used / wall,
                }
                return clips, wall, cpu

            with contextlib.ExitStack() as running:
                for delay, proxy_port in proxies.items():
                    running.enter_context(
                        latency_proxy(proxy_port, local.server.s3_port, delay, log=local.log)
                    )
                pinned = local.pin()
                log.info("bucket latency: CPUs of each process's threads: %s", pinned)
                for store in STORES:  # warm-up, untimed: imports, the clients, the page cache
                    measure(store, "disk")
                    measure(
                        store, f"{DELAYS_MS[0]} ms, no cache" if store == "frames" else f"{DELAYS_MS[0]} ms"
                    )
                seconds.clear()
                measurements = {
                    f"{store}|{case}": partial(measure, store, case)
                    for store in STORES
                    for case in CASES[store]
                }
                cpu = interleaved(measurements, rounds)
                slowest = f"http://127.0.0.1:{proxies[DELAYS_MS[-1]]}"
                with mock.patch.dict(os.environ, {"AWS_ENDPOINT_URL": slowest}):
                    clients, versions = range_clients.measure(
                        spans, slowest, local.server_cpu, max(2, rounds)
                    )
            manifest_bytes = {
                store: sum(s.bytes for s in load_manifest(shards[(store, "disk")], "train").shards)
                for store in STORES
            }
    wall = {key: Samples(tuple(values)) for key, values in seconds.items()}
    for key, per_clip in traffic.items():  # the bytes of each clip's own frames: those it read from disk
        per_clip["frame_bytes"] = traffic[f"{key.split('|')[0]}|disk"]["frame_bytes"]
    return BenchmarkResult(
        name="bucket_latency",
        title="A bucket with latency: the loader from a cold cache, with and without fetch-ahead, against local disk",
        summary=" ".join(__doc__.split("\n\n", 1)[1].split())
        + f" Medians of {rounds} interleaved rounds; {len(videos)} videos ({copies} copies of 4) in one shard a"
        f" store; the clients' GETs: the {len(spans)} of one epoch of {SPANS.replace('|', ', ')}, medians of"
        f" {max(2, rounds)} interleaved rounds.",
        inputs={
            "stores": STORES,
            "delays_ms": DELAYS_MS,
            "frames": FRAMES,
            "videos": len(videos),
            "max_samples_per_shard": per_shard,
            "shard_bytes": manifest_bytes,
            "thread_cpus": pinned,
            "client_versions": versions,
        },
        tables=tables(cpu, wall, traffic, clients, versions),
        raw={
            "cpu_seconds_per_clip": cpu,
            "wall_seconds_per_clip": wall,
            "traffic_per_clip": traffic,
            "range_clients": clients,
        },
        notes=notes(cpu, wall, traffic, clients),
        quick=quick,
    )
