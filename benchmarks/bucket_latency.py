"""Issue 47: the training loader reading a bucket 20 and 50 ms away, cache cold, against local disk.

Data: the "10 s" videos of `benchmarks.data_loading` (synthetic 10-s 640x360 30-fps, Kinetics-like
length), sharded as `vidtx shard` does by default (up to 1,000 videos a shard: here one shard a split)
into a bucket of SeaweedFS on 127.0.0.1 (`benchmarks/local_bucket.py`) and onto local disk as both stores: re-encoded video (short side 256) and frames (JPEG,
short side 256). The bucket is read through `infra/local/latency_proxy.py`, which holds every
request back 20 or 50 ms (a cloud bucket's first-byte latency in its region), with a cold cache
(`data.cache_dir` empty at the start of each epoch): with fetch-ahead (the defaults of
`data.fetch_ahead`, `fetch_requests`, `fetch_part_mb`) and without (`data.fetch_ahead: 0`: each
shard fetched when its read starts, as one stream); and the frames store without a cache, where a
clip reads only its frames (a ranged GET per span of frames within `RANGE_SLACK` of each other, all
in flight at once), with read-ahead (`data.read_ahead`, its default of 2, and 8 and 16) and without. Loader:
`build_train_loader` at 8x224, segment sampling, the default augmentation, a shuffle buffer of 2
(small beside the epoch, as a real one is beside a real epoch), in process (no DataLoader worker),
one epoch per measurement. CPU time is this process's (`time.process_time`: the loader and the
fetcher's threads), pinned to one core; SeaweedFS (its store and gateway) and the latency proxy are
pinned to the other, and their CPU is measured apart, per clip: where it nears the wall time per clip
(their core saturated), the test server, not the loader, is the limit. MB per clip is what came from the bucket (whole tars
into the cache, or the ranged GETs); "÷ frames" divides it by the bytes of the JPEG frames the clip
decodes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from functools import partial
from pathlib import Path
from unittest import mock

from benchmarks.local_bucket import local_bucket
from benchmarks.object_storage import epoch
from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import Samples, interleaved, round_ratios
from benchmarks.videos import shard_store, write_busy_videos, write_copies
from infra.local.latency_proxy import latency_proxy, requests
from infra.local.ports import free_port
from vidtx import storage
from vidtx.config import ShardConfig
from vidtx.manifest import load_manifest
from vidtx.storage import objects

log = logging.getLogger(__name__)

read_range, read_ranges = objects.read_range, storage.read_ranges  # as the benchmark wraps them

STORES = ("re-encoded", "frames")
DELAYS_MS = (20, 50)
FRAMES = 8
SLOWEST = f"{DELAYS_MS[-1]} ms"
MORE_READ_AHEAD = (8, 16)  # beside the default (`data.read_ahead`): what more samples in flight win
WITH_CACHE = ["disk", *(f"{delay} ms" for delay in DELAYS_MS), f"{SLOWEST}, no fetch-ahead"]
# the frames store is also read without a cache: a ranged GET per clip, `data.read_ahead` in flight
CASES = {
    "re-encoded": WITH_CACHE,
    "frames": [
        *WITH_CACHE,
        *(f"{delay} ms, no cache" for delay in DELAYS_MS),
        f"{SLOWEST}, no cache, no read-ahead",
        *(f"{SLOWEST}, no cache, read-ahead {ahead}" for ahead in MORE_READ_AHEAD),
    ],
}


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    copies, rounds = (2, 1) if quick else (6, 3)
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-latency-") as tmp:
        work = Path(tmp)
        videos = write_copies(write_busy_videos(work / "distinct", 4), work / "busy" / "busy", copies)
        log.info("bucket latency: %d videos, sharded as vidtx shard does by default", len(videos))
        per_shard = ShardConfig.model_fields["max_samples_per_shard"].default
        with local_bucket(work, "bench") as local:
            bucket = local.url
            shards = {
                (store, where): shard_store(work / "busy", target, store, max_samples_per_shard=per_shard)
                for store in STORES
                for where, target in (("disk", work / "shards" / store), ("bucket", f"{bucket}/{store}"))
            }
            proxies = {delay: free_port() for delay in DELAYS_MS}
            seconds: dict[str, list[float]] = {}
            traffic: dict[str, dict[str, float]] = {}

            def measure(store: str, case: str) -> float:
                """One epoch of `case` (one of CASES); its CPU s / clip."""
                counts = {"fetched": 0, "frames": 0}

                def fetched(where: str, start: int, end: int) -> bytes:
                    counts["fetched"] += end - start
                    return read_range(where, start, end)

                def frames(
                    where: storage.Location, offset: int, ranges: list[tuple[int, int]]
                ) -> list[bytes]:
                    counts["frames"] += sum(end - start for start, end in ranges)
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
                made = requests(local.log, mark)
                downloaded = (
                    counts["fetched"]
                    if cache is None
                    else sum(f.stat().st_size for f in cache.iterdir() if f.suffix == ".tar")
                )
                traffic[f"{store}|{case}"] = {
                    "requests": len(made) / clips,
                    "bytes": downloaded / clips,
                    "frame_bytes": counts["frames"] / clips,
                    "server_cpu": (local.server_cpu() - server_cpu) / clips,
                    "server_busy": (local.server_cpu() - server_cpu) / wall,
                }
                return clips, wall, cpu

            with contextlib.ExitStack() as running:
                for delay, proxy_port in proxies.items():
                    running.enter_context(
                        latency_proxy(proxy_port, local.server.s3_port, delay, log=local.log)
                    )
                local.pin()
                cpu = interleaved(
                    {
                        f"{store}|{case}": partial(measure, store, case)
                        for store in STORES
                        for case in CASES[store]
                    },
                    rounds,
                )
            manifest_bytes = {
                store: sum(s.bytes for s in load_manifest(shards[(store, "disk")], "train").shards)
                for store in STORES
            }
    wall = {key: Samples(tuple(values)) for key, values in seconds.items()}
    return BenchmarkResult(
        name="bucket_latency",
        title="A bucket with latency: the loader from a cold cache, with and without fetch-ahead, against local disk",
        summary=" ".join(__doc__.split("\n\n", 1)[1].split())
        + f" Medians of {rounds} interleaved rounds; {len(videos)} videos ({copies} copies of 4).",
        inputs={
            "stores": STORES,
            "delays_ms": DELAYS_MS,
            "frames": FRAMES,
            "videos": len(videos),
            "shard_bytes": manifest_bytes,
        },
        tables=tables(cpu, wall, traffic),
        raw={"cpu_seconds_per_clip": cpu, "wall_seconds_per_clip": wall, "traffic_per_clip": traffic},
        notes=notes(cpu, wall, traffic),
        quick=quick,
    )


def tables(
    cpu: dict[str, Samples], wall: dict[str, Samples], traffic: dict[str, dict[str, float]]
) -> list[Table]:
    rows = []
    for store in STORES:
        disk, disk_cpu = wall[f"{store}|disk"], cpu[f"{store}|disk"]
        for case in CASES[store]:
            key = f"{store}|{case}"
            per_clip = traffic.get(key, {})
            bucket = case != "disk"
            frame_bytes = per_clip.get("frame_bytes", 0)
            rows.append(
                [
                    store,
                    case,
                    fmt(1 / wall[key].median),
                    fmt(round_ratios(disk, wall[key]).median, 2) if bucket else "1",
                    fmt(cpu[key].median * 1e3),
                    fmt(round_ratios(cpu[key], disk_cpu).median, 2) if bucket else "1",
                    fmt(per_clip["server_cpu"] * 1e3) if bucket else "",
                    busy(per_clip["server_busy"]) if bucket else "",
                    fmt(per_clip["requests"], 2) if bucket else "",
                    fmt(per_clip["bytes"] / 1e6, 2) if bucket else "",
                    fmt(per_clip["bytes"] / frame_bytes, 2) if bucket and frame_bytes else "",
                ]
            )
    return [
        Table(
            "Loader at 8x224, one core, in process: local disk against a bucket 20 and 50 ms away, cache cold (SeaweedFS and the proxy on the other core)",
            [
                "store",
                "read from",
                "clips/s",
                "÷ disk",
                "CPU ms / clip",
                "CPU ÷ disk",
                "S3 server CPU ms / clip",
                "its core busy",
                "requests / clip",
                "MB / clip",
                "MB ÷ frames",
            ],
            rows,
        )
    ]


def busy(fraction: float) -> str:
    """The server's core use over an epoch, and whether it was the limit."""
    return f"{fmt(fraction * 100)}%" + (" (saturated)" if fraction > 0.9 else "")


def notes(
    cpu: dict[str, Samples], wall: dict[str, Samples], traffic: dict[str, dict[str, float]]
) -> list[str]:
    lines = []
    for store in STORES:
        disk = wall[f"{store}|disk"]
        ratios = {
            case: round_ratios(disk, wall[f"{store}|{case}"]).median
            for case in CASES[store]
            if case != "disk"
        }
        fetcher = round_ratios(cpu[f"{store}|{SLOWEST}"], cpu[f"{store}|disk"]).median
        lines.append(
            f"{store}: from the bucket with fetch-ahead "
            + ", ".join(
                f"{fmt(ratios[f'{delay} ms'], 2)}x disk's clips/s at {delay} ms" for delay in DELAYS_MS
            )
            + f" (without: {fmt(ratios[f'{SLOWEST}, no fetch-ahead'], 2)}x at {SLOWEST}); the loader and its "
            f"fetcher take {fmt(fetcher, 2)}x disk's CPU per clip."
        )
    frames = {
        case: round_ratios(wall["frames|disk"], wall[f"frames|{case}"]).median
        for case in CASES["frames"]
        if "no cache" in case
    }
    uncached = [(delay, f"frames|{delay} ms, no cache") for delay in DELAYS_MS]
    lines.append(
        "frames without a cache (a clip's frames only): "
        + ", ".join(
            f"{fmt(frames[key.split('|')[1]], 2)}x disk's clips/s at {delay} ms" for delay, key in uncached
        )
        + f" with read-ahead ({fmt(frames[f'{SLOWEST}, no cache, no read-ahead'], 2)}x at {SLOWEST} reading one "
        f"sample at a time); {fmt(traffic[uncached[-1][1]]['bytes'] / traffic[uncached[-1][1]]['frame_bytes'], 2)}x "
        f"the clip's own frame bytes downloaded, "
        f"{fmt(round_ratios(cpu[uncached[-1][1]], cpu['frames|disk']).median, 2)}x disk's CPU per clip; the S3 "
        f"server spends {fmt(traffic[uncached[-1][1]]['server_cpu'] * 1e3)} ms of CPU per clip at {SLOWEST}, "
        f"{fmt(traffic[uncached[-1][1]]['server_cpu'] / wall[uncached[-1][1]].median * 100, 2)}% of the wall time "
        "per clip (one core is 100%)."
    )
    deeper = {ahead: frames[f"{SLOWEST}, no cache, read-ahead {ahead}"] for ahead in MORE_READ_AHEAD}
    deepest = f"frames|{SLOWEST}, no cache, read-ahead {MORE_READ_AHEAD[-1]}"
    lines.append(
        f"frames without a cache at {SLOWEST}, more samples read ahead: "
        + ", ".join(f"{fmt(ratio, 2)}x disk's clips/s with {ahead}" for ahead, ratio in deeper.items())
        + f", at {fmt(round_ratios(cpu[deepest], cpu['frames|disk']).median, 2)}x disk's CPU per clip."
    )
    return lines
