"""Issue 9.3: how fast the data pipeline turns videos into shards and shards into training clips.

* Loader against its limit: `build_train_loader` clips/s from shards (tar reading, decord decoding
  from memory, segment sampling, random resized crop to 224, normalisation, collation) against
  decord decoding the same videos straight from disk with the same sampling and decode-time resize
  and nothing else, in a torch DataLoader with the same number of workers (1 and 2).
* Sharding against `tarfile`: `shard_dataset` (probe every video, write the tar, hash it, write the
  manifest) against copying the same files into one tar with the standard library.
* Per CPU core (no worker processes, one decode thread, one torch thread), for the videos as they
  are and after the training-friendly re-encode (short side 256, a keyframe every 16 frames), against
  the GPU-feed budget: the clips/s one GPU trains on, divided by the cores each GPU of a typical
  8-GPU node has.

The videos are `benchmarks.videos.write_busy_videos` (10 s, 640x360, 30 fps, x264 CRF 23, default
GOP), each written a few times over so that every measurement runs for one full epoch of the loader.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import decord
import numpy as np
from torch.utils.data import DataLoader, Dataset

from benchmarks.results import RESULTS_DIR, BenchmarkResult, Table, fmt, read_result
from benchmarks.timing import Samples, interleaved, torch_threads
from benchmarks.videos import extract_videos, shard, tar_copy, write_busy_videos, write_copies
from vidtx.config import DataConfig, ReencodeConfig
from vidtx.data.loader import build_train_loader
from vidtx.data.sampling import FrameSampler
from vidtx.media.decode import scaled_size
from vidtx.models import model_info

log = logging.getLogger(__name__)

# GPU-feed budget. H100 SXM: 989 TFLOPS dense bf16; 40% MFU is the realistic H100 target of
# shared/notes/perf-anchors.md. 8-GPU H100 nodes have 96-112 physical cores (AWS p5.48xlarge:
# 192 vCPUs; DGX H100: 2 x 56 cores), i.e. 12-14 per GPU; published video recipes use 8-14 workers.
GPU_NAME, GPU_PEAK_FLOPS, STATED_MFU, CORES_PER_GPU = "H100 SXM", 989e12, 0.40, 12
REENCODE = ReencodeConfig(short_side=256, keyframe_interval=16)
LOADER = DataConfig(num_frames=8)  # the defaults: segment sampling, short side 256, 224 crops
SOURCE_SIZE = (640, 360)


@dataclass(frozen=True)
class Plan:
    distinct: int  # different videos
    copies: int  # times each is written: samples = distinct x copies
    rounds: int  # interleaved repeats
    batch_size: int


FULL, QUICK = (
    Plan(distinct=6, copies=8, rounds=2, batch_size=4),
    Plan(distinct=3, copies=4, rounds=1, batch_size=2),
)


def steady_rate(batches: Iterator, count: int, skip: int) -> float:
    """Clips/s over `count` batches, timed from the end of batch `skip` (worker start-up excluded)."""
    start, clips = 0.0, 0
    for index, batch in enumerate(itertools.islice(batches, count)):
        if index + 1 == skip:
            start = time.perf_counter()
        elif index + 1 > skip:
            clips += len(batch[0] if isinstance(batch, list | tuple) else batch)
    return clips / (time.perf_counter() - start)


def epochs(loader: Iterable) -> Iterator:
    while True:
        yield from loader


def loader_rate(shards: Path, num_frames: int, workers: int, batches: int, batch_size: int) -> float:
    cfg = LOADER.model_copy(update={"shards": shards, "num_frames": num_frames, "num_workers": workers})
    loader = build_train_loader(cfg, batch_size=batch_size, seed=0)
    with torch_threads(1):
        return steady_rate(epochs(loader), batches, skip=max(workers, 1))


class DiskClips(Dataset):
    """The limit: decord reading a file from disk, the loader's sampling and decode-time resize."""

    def __init__(self, paths: list[Path], num_frames: int) -> None:
        self.paths = paths
        self.sampler = FrameSampler(LOADER.sampling, num_frames, LOADER.frame_stride)
        self.width, self.height = scaled_size(*SOURCE_SIZE, LOADER.short_side)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> np.ndarray:
        reader = decord.VideoReader(
            str(self.paths[index]), width=self.width, height=self.height, num_threads=1
        )
        indices = self.sampler.train(len(reader), np.random.default_rng(index))
        return reader.get_batch(indices.tolist()).asnumpy()  # (T, H, W, 3) uint8


def limit_rate(paths: list[Path], num_frames: int, workers: int, batch_size: int) -> float:
    context = {"multiprocessing_context": "forkserver"} if workers else {}
    loader = DataLoader(DiskClips(paths, num_frames), batch_size=batch_size, num_workers=workers, **context)
    with torch_threads(1):
        return steady_rate(iter(loader), len(loader), skip=max(workers, 1))


def measure_sharding(dataset: Path, paths: list[Path], work: Path, rounds: int) -> dict[str, Samples]:
    """Seconds to write the dataset as shards (1 and 2 processes) or as a plain tar, interleaved."""
    outputs = (work / f"sharding-{index}" for index in itertools.count())

    def timed(write: Callable[[Path], object]) -> Callable[[], float]:
        def measure() -> float:
            output = next(outputs)
            start = time.perf_counter()
            write(output)
            seconds = time.perf_counter() - start
            shutil.rmtree(output)
            return seconds

        return measure

    return interleaved(
        {
            "tarfile": timed(lambda output: tar_copy(paths, output / "copy.tar")),
            "shard, 1 process": timed(lambda output: shard(dataset, output, processes=1)),
            "shard, 2 processes": timed(lambda output: shard(dataset, output, processes=2)),
        },
        rounds,
    )


def gpu_demand(num_frames: int, results_dir: Path = RESULTS_DIR) -> tuple[float, str]:
    """Clips/s one GPU trains X-ViT B/16 on at `num_frames` x 224: measured by benchmarks/gpu.py when a
    GPU run was committed, else from the model's FLOPs at the stated MFU."""
    name = f"xvit_b16_{num_frames}x224"
    measured = read_result("gpu", results_dir)
    if measured and not measured["quick"] and name in measured["raw"].get("training", {}):
        gpu = measured["environment"]["gpu"]
        return measured["raw"]["training"][name]["clips_per_second"], f"measured on {gpu} (benchmarks/gpu.py)"
    flops_per_clip = 3 * 2 * model_info(name)["gflops"] * 1e9  # forward + backward, 2 FLOPs per MAC
    rate = STATED_MFU * GPU_PEAK_FLOPS / flops_per_clip
    return rate, f"{GPU_NAME} at {STATED_MFU:.0%} MFU, {fmt(flops_per_clip / 1e12)} TFLOP per training clip"


@dataclass(frozen=True)
class Measurements:
    plan: Plan
    sharding: dict[str, Samples]  # seconds per method
    reencode_seconds: float  # sharding the distinct videos with re-encode, 2 processes
    workers: dict[str, Samples]  # clips/s, "loader/1", "limit/2", ...
    per_core: dict[str, Samples]  # clips/s, "original/8", "re-encoded/16", ...
    megabytes: dict[str, float]  # mean file size per encoding


def findings(m: Measurements, demand: dict[int, tuple[float, str]]) -> list[str]:
    """What the figures show, stated from the measurements."""
    loader = {count: m.workers[f"loader/{count}"].median for count in (1, 2)}
    limit = {count: m.workers[f"limit/{count}"].median for count in (1, 2)}
    core = {key: samples.median for key, samples in m.per_core.items()}
    shard_slowdown = m.sharding["shard, 1 process"].median / m.sharding["tarfile"].median
    needed = {frames: demand[frames][0] / core[f"re-encoded/{frames}"] for frames in (8, 16)}
    return [
        f"The loader delivers {fmt(loader[1] / limit[1], 2)}x (1 worker) and {fmt(loader[2] / limit[2], 2)}x "
        "(2 workers) the clips/s of bare decord decoding: the rest of each clip's time goes to the "
        "crop, resize and normalisation in torch, reading the tar and collating. Two workers give "
        f"{fmt(loader[2] / loader[1], 2)}x one worker on this 2-core machine shared with other jobs.",
        f"Sharding takes {fmt(shard_slowdown, 2)}x the time of a plain tar copy with one process: every "
        "video is opened and its first and last frames decoded (with a 250-frame GOP the last frame "
        "costs up to 249 decoded frames), and every tar is hashed. With 2 processes, starting the "
        "worker processes is part of the time, which small jobs like this one do not amortise. "
        f"Sharding with the re-encode takes {fmt(m.reencode_seconds / m.plan.distinct, 2)} s of wall time "
        "per video with 2 processes, once per dataset.",
        f"The re-encode makes the loader {fmt(core['re-encoded/8'] / core['original/8'], 2)}x (8 frames) and "
        f"{fmt(core['re-encoded/16'] / core['original/16'], 2)}x (16 frames) faster per core: at 256 px and "
        "a keyframe every 16 frames each sampled frame costs at most 15 extra decoded frames of a "
        "smaller picture, instead of up to 249 from the previous keyframe of a 250-frame GOP.",
        f"Against the GPU-feed budget ({demand[8][1]}) the re-encoded videos need {fmt(needed[8], 2)} "
        f"(8 frames) and {fmt(needed[16], 2)} (16 frames) cores per GPU "
        + (
            f"against the {CORES_PER_GPU} of a typical node: with decord on the CPU this loader would keep "
            f"the GPU {fmt(CORES_PER_GPU / needed[8] * 100, 2)}% (8 frames) and "
            f"{fmt(CORES_PER_GPU / needed[16] * 100, 2)}% (16 frames) busy. Repeated sampling "
            "(`data.repeated_sampling`), fewer or smaller decoded frames, or GPU decoding are the levers left."
            if max(needed.values()) > CORES_PER_GPU
            else f"within the {CORES_PER_GPU} of a typical node."
        ),
    ]


def report(m: Measurements, demand: dict[int, tuple[float, str]], quick: bool) -> BenchmarkResult:
    samples = m.plan.distinct * m.plan.copies
    source_mb = m.megabytes["original"] * samples
    tar_per_video = m.sharding["tarfile"].median / samples

    def sharding_row(method: str, videos: int, seconds: float) -> list[str]:
        rate = videos / seconds
        return [
            method,
            str(videos),
            fmt(seconds),
            fmt(rate),
            fmt(rate * m.megabytes["original"]),
            fmt(1 / rate / tar_per_video),
        ]

    sharding_rows = [sharding_row(method, samples, t.median) for method, t in m.sharding.items()]
    sharding_rows.append(sharding_row("shard + re-encode, 2 processes", m.plan.distinct, m.reencode_seconds))
    worker_rows = []
    for count in (1, 2):
        loader, limit = m.workers[f"loader/{count}"].median, m.workers[f"limit/{count}"].median
        worker_rows.append([str(count), fmt(loader), fmt(limit), fmt(loader / limit)])
    core_rows = []
    for key, supply in m.per_core.items():
        encoding, frames = key.split("/")
        gpu_rate, _ = demand[int(frames)]
        budget = gpu_rate / CORES_PER_GPU
        core_rows.append(
            [
                encoding,
                frames,
                fmt(m.megabytes[encoding]),
                fmt(supply.median),
                fmt(gpu_rate),
                fmt(budget),
                fmt(supply.median / budget),
                fmt(gpu_rate / supply.median),
            ]
        )
    return BenchmarkResult(
        name="data_loading",
        title="Data loading and sharding",
        summary=(
            f"{m.plan.distinct} different 10-s 640x360 30-fps H.264 videos (CRF 23, x264's default 250-frame "
            f"GOP, ~{fmt(m.megabytes['original'])} MB each), each written {m.plan.copies} times: {samples} "
            f"samples, shards of 8. Loader: `build_train_loader` with the default data config (8 or 16 "
            "frames by segment sampling, short side 256 at decode, random resized crop to 224, "
            f"normalisation), batches of {m.plan.batch_size}, clips/s over one epoch after each worker's "
            "first batch. Limit: decord reading the same files from disk with the same sampling and "
            "decode size in a torch DataLoader, nothing else. Per core: the loader without worker "
            "processes, one decode thread, one torch thread. Re-encode: `vidtx shard` with short side 256 "
            f"and a keyframe every 16 frames. Medians of {m.plan.rounds} interleaved rounds."
        ),
        inputs={
            "plan": m.plan.__dict__,
            "source_size": SOURCE_SIZE,
            "loader": LOADER.model_dump(mode="json", exclude={"shards"}),
            "reencode": REENCODE.model_dump(mode="json"),
            "gpu_budget": {
                "gpu": GPU_NAME,
                "peak_flops": GPU_PEAK_FLOPS,
                "stated_mfu": STATED_MFU,
                "cores_per_gpu": CORES_PER_GPU,
                "demand": {
                    str(frames): {"clips_per_second": rate, "source": source}
                    for frames, (rate, source) in demand.items()
                },
            },
        },
        tables=[
            Table(
                "Loader against decord from disk (videos as they are, 8 frames), clips/s",
                ["DataLoader workers", "loader", "decord from disk", "loader ÷ limit"],
                worker_rows,
            ),
            Table(
                f"Sharding against copying the files into a tar with tarfile ({fmt(source_mb)} MB)",
                ["method", "videos", "seconds", "videos/s", "MB/s", "time per video × tarfile"],
                sharding_rows,
            ),
            Table(
                f"Loader per CPU core against the GPU-feed budget (X-ViT B/16, {CORES_PER_GPU} cores per GPU)",
                [
                    "videos",
                    "frames",
                    "MB / video",
                    "clips/s per core",
                    "GPU clips/s",
                    "budget per core",
                    "supply ÷ budget",
                    "cores per GPU needed",
                ],
                core_rows,
            ),
        ],
        raw={
            "sharding_seconds": m.sharding,
            "reencode_shard_seconds": m.reencode_seconds,
            "workers_clips_per_second": m.workers,
            "per_core_clips_per_second": m.per_core,
            "megabytes_per_video": m.megabytes,
        },
        notes=findings(m, demand),
        quick=quick,
    )


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    plan = QUICK if quick else FULL
    samples = plan.distinct * plan.copies
    batches = samples // plan.batch_size  # one epoch
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-data-") as tmp:
        work = Path(tmp)
        log.info("data loading: writing %d videos", plan.distinct)
        distinct = write_busy_videos(work / "distinct" / "busy", plan.distinct)
        start = time.perf_counter()
        shard(work / "distinct", work / "reencoded-distinct-shards", processes=2, reencode=REENCODE)
        reencode_seconds = time.perf_counter() - start
        videos = {
            "original": write_copies(distinct, work / "original" / "busy", plan.copies),
            "re-encoded": write_copies(
                extract_videos(work / "reencoded-distinct-shards", work / "reencoded-distinct"),
                work / "re-encoded" / "busy",
                plan.copies,
            ),
        }
        log.info("data loading: sharding against tarfile")
        sharding = measure_sharding(work / "original", videos["original"], work, plan.rounds)
        shards = {
            encoding: shard(work / encoding, work / f"{encoding}-shards", processes=2) for encoding in videos
        }
        log.info("data loading: loader against decord from disk")
        workers = interleaved(
            {
                f"{kind}/{count}": partial(rate, source, 8, count, *extra)
                for count in (1, 2)
                for kind, rate, source, extra in (
                    ("loader", loader_rate, shards["original"], (batches, plan.batch_size)),
                    ("limit", limit_rate, videos["original"], (plan.batch_size,)),
                )
            },
            plan.rounds,
        )
        log.info("data loading: loader per core")
        per_core = interleaved(
            {
                f"{encoding}/{frames}": partial(
                    loader_rate, shards[encoding], frames, 0, batches, plan.batch_size
                )
                for encoding in videos
                for frames in (8, 16)
            },
            plan.rounds,
        )
        megabytes = {
            encoding: sum(p.stat().st_size for p in paths) / len(paths) / 1e6
            for encoding, paths in videos.items()
        }
    measured = Measurements(plan, sharding, reencode_seconds, workers, per_core, megabytes)
    return report(measured, {frames: gpu_demand(frames) for frames in (8, 16)}, quick)
