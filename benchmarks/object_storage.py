"""Issue 29: the training loader reading shards from a bucket against the same shards on local disk.

Data: the "10 s" dataset of `benchmarks.data_loading` (synthetic 10-s 640x360 30-fps videos,
Kinetics-like length), sharded by `vidtx shard` straight into a bucket of SeaweedFS on 127.0.0.1
(`benchmarks/local_bucket.py`) and onto local disk, as two stores: re-encoded
video (short side 256, a keyframe every 16 frames) and frames (JPEG, short side 256). Loader:
`build_train_loader` at 8x224 with the default training augmentation, in process (no DataLoader
worker, one thread), one epoch per measurement. CPU time is this process's (`time.process_time`: the
loader and the S3 client's threads), not the S3 server's, which shares the machine's 2 cores.
Requests are counted in the log of the recorder in front of the server; bytes per clip are those the loader asked for (the ranged
reads of the frames store, the whole tars streamed for the video store).
"""

from __future__ import annotations

import logging
import tempfile
import time
from functools import partial
from pathlib import Path

from benchmarks.data_loading import LOADER, gpu_demand
from benchmarks.local_bucket import local_bucket
from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import Samples, interleaved, round_ratios, torch_threads
from benchmarks.videos import shard_store, write_busy_videos, write_copies
from infra.local.latency_proxy import requests
from vidtx import storage
from vidtx.data.train_loader import build_train_loader
from vidtx.locations import Location
from vidtx.manifest import load_manifest
from vidtx.storage import objects

log = logging.getLogger(__name__)

STORES = ("re-encoded", "frames")
# (store, the loader's frame sampling, a local cache of the bucket's tars): segment sampling spreads
# a clip over the whole video (SSv2), dense sampling takes 8 frames 4 apart (Kinetics); the frames
# store's one ranged request per clip spans the first to the last sampled frame, so its bytes depend
# on which. With the cache (`data.cache_dir`, filled by the first round) the bucket is asked only
# each tar's size.
CASES = {
    "re-encoded, segment": ("re-encoded", "segment", False),
    "frames, segment": ("frames", "segment", False),
    "frames, dense": ("frames", "dense", False),
    "re-encoded, segment, cache": ("re-encoded", "segment", True),
    "frames, segment, cache": ("frames", "segment", True),
}
FRAMES = 8


class ReadCounter:
    """Bytes the loader asks of a bucket: every ranged read (`vidtx.storage.objects.read_range`, which
    frame reads and fetch-ahead's parts make), and every tar it streams (whole: its size from `sizes`,
    so that counting makes no request of its own)."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.bytes, self.sizes = 0, sizes
        self._read_range, self._open_input = objects.read_range, storage.open_input

    def __enter__(self) -> ReadCounter:
        def read_range(where: str, start: int, end: int) -> bytes:
            self.bytes += end - start
            return self._read_range(where, start, end)

        def open_input(where: Location) -> object:
            self.bytes += self.sizes.get(str(where), 0)
            return self._open_input(where)

        objects.read_range, storage.open_input = read_range, open_input
        return self

    def __exit__(self, *exc: object) -> None:
        objects.read_range, storage.open_input = self._read_range, self._open_input


def epoch(shards: Location, **data: object) -> tuple[int, float, float]:
    """(clips, wall seconds, CPU seconds of this process) of one training epoch from `shards`, read in
    this process with the `data` fields (of DataConfig) over the benchmarks' loader settings."""
    cfg = LOADER.model_copy(update={"shards": shards, "num_frames": FRAMES, "num_workers": 0, **data})
    loader = build_train_loader(cfg, batch_size=4, seed=0)
    with torch_threads(1):
        wall, cpu = time.perf_counter(), time.process_time()
        clips = sum(len(batch.clips) for batch in loader)
        return clips, time.perf_counter() - wall, time.process_time() - cpu


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    copies, rounds = (1, 2) if quick else (3, 3)
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-s3-") as tmp:
        work = Path(tmp)
        videos = write_copies(
            write_busy_videos(work / "distinct", 2 if quick else 4), work / "busy" / "busy", copies
        )
        log.info("object storage: %d videos", len(videos))
        with local_bucket(work, "bench") as local:
            bucket = local.url
            shards = {
                (store, where): shard_store(work / "busy", target, store)
                for store in STORES
                for where, target in (("disk", work / "shards" / store), ("bucket", f"{bucket}/{store}"))
            }
            seconds: dict[str, list[float]] = {}

            def measure(case: str, where: str) -> float:
                store, sampling, cached = CASES[case]
                cache = work / "cache" / case if cached and where == "bucket" else None
                clips, wall, cpu = epoch(shards[(store, where)], sampling=sampling, cache_dir=cache)
                seconds.setdefault(f"{case}|{where}", []).append(wall / clips)
                return cpu / clips

            cpu = interleaved(
                {
                    f"{case}|{where}": partial(measure, case, where)
                    for case in CASES
                    for where in ("disk", "bucket")
                },
                rounds,
            )
            traffic = {
                case: bucket_traffic(
                    shards[(store, "bucket")],
                    sampling,
                    local.log,
                    work / "cache" / case if cached else None,
                )
                for case, (store, sampling, cached) in CASES.items()
            }
    wall = {key: Samples(tuple(values)) for key, values in seconds.items()}
    demand, demand_source = gpu_demand(FRAMES)
    return BenchmarkResult(
        name="object_storage",
        title="Object storage: the loader reading a bucket against local disk",
        summary=" ".join(__doc__.split("\n\n", 1)[1].split())
        + f" Medians of {rounds} interleaved rounds; every video written {copies} times."
        + f" GPU demand: {fmt(demand)} clips/s at {FRAMES} frames ({demand_source}).",
        inputs={
            "cases": CASES,
            "frames": FRAMES,
            "videos": len(videos),
            "loader": "default, in process",
        },
        tables=tables(cpu, wall, traffic, demand),
        raw={
            "cpu_seconds_per_clip": cpu,
            "wall_seconds_per_clip": wall,
            "traffic_per_clip": traffic,
            "gpu_clips_per_second": demand,
        },
        notes=notes(cpu, traffic, demand),
        quick=quick,
    )


def bucket_traffic(shards: str, sampling: str, log_file: Path, cache_dir: Path | None) -> dict[str, float]:
    """Requests and bytes per training clip of one epoch read from the bucket (with a warm cache:
    the one filled by the measured rounds)."""
    manifest = load_manifest(shards, "train")
    sizes = dict(zip(manifest.shard_urls(), (shard.bytes for shard in manifest.shards), strict=True))
    mark = log_file.stat().st_size
    with ReadCounter(sizes) as counter:
        clips, _, _ = epoch(shards, sampling=sampling, cache_dir=cache_dir)
    made = [request for request in requests(log_file, mark) if request.startswith(("GET", "HEAD"))]
    tar_gets = sum(1 for request in made if request.startswith("GET") and request.endswith(".tar"))
    return {"requests": len(made) / clips, "tar_gets": tar_gets / clips, "bytes": counter.bytes / clips}


def tables(
    cpu: dict[str, Samples], wall: dict[str, Samples], traffic: dict[str, dict[str, float]], demand: float
) -> list[Table]:
    rows, needs = [], []
    for case in CASES:
        disk, bucket = cpu[f"{case}|disk"], cpu[f"{case}|bucket"]
        rows.append(
            [
                case,
                fmt(1 / wall[f"{case}|disk"].median),
                fmt(1 / wall[f"{case}|bucket"].median),
                fmt(disk.median * 1e3),
                fmt(bucket.median * 1e3),
                fmt(round_ratios(bucket, disk).median, 2),
            ]
        )
        per_clip = traffic[case]
        needs.append(
            [
                case,
                fmt(per_clip["tar_gets"], 2),
                fmt(per_clip["requests"], 2),
                fmt(per_clip["bytes"] / 1e6, 2),
                fmt(demand * per_clip["bytes"] / 1e9, 2),
                fmt(demand * per_clip["requests"]),
            ]
        )
    return [
        Table(
            "Loader at 8x224, one core, in process: local disk against the local S3 server",
            [
                "store, sampling",
                "disk clips/s",
                "bucket clips/s",
                "disk CPU ms / clip",
                "bucket CPU ms / clip",
                "bucket ÷ disk CPU",
            ],
            rows,
        ),
        Table(
            "What the loader asks of the bucket per clip (all requests: with the manifests, indexes and HEADs of an epoch of few clips), and one H200's needs at the demand above",
            [
                "store, sampling",
                "GETs of tars / clip",
                "all requests / clip",
                "MB / clip",
                "GB/s per GPU",
                "requests/s per GPU",
            ],
            needs,
        ),
    ]


def notes(cpu: dict[str, Samples], traffic: dict[str, dict[str, float]], demand: float) -> list[str]:
    lines = []
    for case in CASES:
        ratio = round_ratios(cpu[f"{case}|bucket"], cpu[f"{case}|disk"]).median
        per_clip = traffic[case]
        lines.append(
            f"{case}: reading the bucket costs the loader {fmt(ratio, 2)}x the CPU time per clip of local disk, "
            f"with {fmt(per_clip['tar_gets'], 2)} GETs of tars ({fmt(per_clip['requests'], 2)} requests in all) and {fmt(per_clip['bytes'] / 1e6, 2)} MB per clip "
            f"({fmt(demand * per_clip['bytes'] / 1e9, 2)} GB/s per GPU)."
        )
    return lines
