"""Issue 9.4: what the training stack (Ray Train + DeepSpeed + MLflow logging) costs per step.

The full loop is `vidtx.stages.train.train` with one Ray worker (one CPU, so one torch thread) on
the demo config: the tiny X-ViT on the synthetic dataset, fp32, 8 clips per step, one DataLoader
worker. The baseline is a bare PyTorch loop in this process with the same model initialisation,
optimizer, schedule, loss, gradient clipping and loader (same seed, so the same batches), on one
torch thread. Steps/s come from the same windows in both: the full loop's `train/clips_per_second`
MLflow metric per `log_every` steps, the bare loop's own clock over the same steps; the first window
(loader start-up) is dropped. Runs alternate: bare, full, bare, ...
"""

from __future__ import annotations

import itertools
import logging
import statistics
import tempfile
import time
from pathlib import Path

import ray
import torch
from mlflow import MlflowClient

from benchmarks.results import REPO_ROOT, BenchmarkResult, Table, fmt
from benchmarks.timing import Samples, torch_threads
from vidtx.clips.normalize import normalize_clips
from vidtx.config import PipelineConfig, SynthConfig, load_config
from vidtx.data.train_loader import build_train_loader
from vidtx.model_factory import model_for
from vidtx.shard.synthetic import generate_dataset
from vidtx.stages.shard import shard_dataset
from vidtx.stages.train import train
from vidtx.train.loss import classification_loss
from vidtx.train.optim import build_optimizer, build_scheduler

log = logging.getLogger(__name__)

DEMO = REPO_ROOT / "configs" / "experiments" / "demo.yaml"
LOG_EVERY = 8
FULL_STAGES, QUICK_STAGES = (1, 0), (1,)  # ZeRO stages of the full runs; 1 is the project default


def demo_config(work: Path, max_steps: int, overrides: list[str]) -> PipelineConfig:
    """The demo pipeline in `work`, validating and checkpointing only after the last step."""
    return load_config(
        DEMO,
        [
            f"workdir={work}",
            f"shard.output={work / 'shards'}",
            f"data.shards={work / 'shards'}",
            f"tracking.tracking_uri=sqlite:///{work / 'mlflow.db'}",
            f"train.storage_path={work / 'ray'}",
            f"train.max_steps={max_steps}",
            f"train.checkpoint_every={max_steps}",
            f"train.val_every={max_steps}",
            "train.val_max_batches=1",
            *overrides,
        ],
    )


def benchmark_config(work: Path, max_steps: int, zero_stage: int) -> PipelineConfig:
    """The demo pipeline on one Ray worker."""
    overrides = ["train.num_workers=1", "train.cpus_per_worker=1", f"train.zero_stage={zero_stage}"]
    return demo_config(work, max_steps, [*overrides, f"train.log_every={LOG_EVERY}"])


def write_dataset(config: PipelineConfig, work: Path, train_videos_per_class: int) -> None:
    synth = SynthConfig(
        output=work / "videos",
        videos_per_class={"train": train_videos_per_class, "val": 2},
        num_frames=16,
        size=64,
    )
    shard_dataset(config.shard.model_copy(update={"source": generate_dataset(synth)}))


def full_loop(config: PipelineConfig, run_name: str) -> tuple[list[float], float]:
    """Steps/s of every logged window after the first, and the wall time of the whole run."""
    start = time.perf_counter()
    result = train(config, run_name=run_name)
    wall = time.perf_counter() - start
    history = MlflowClient(result.tracking_uri).get_metric_history(
        result.mlflow_run_id, "train/clips_per_second"
    )
    rates = [point.value for point in sorted(history, key=lambda point: point.step)]
    return [rate / config.train.micro_batch_size for rate in rates[1:]], wall


def bare_loop(config: PipelineConfig) -> tuple[list[float], float]:
    """The same training without Ray, DeepSpeed or MLflow: steps/s per window after the first, wall time."""
    start = time.perf_counter()
    train_cfg, data = config.train, config.data
    torch.manual_seed(train_cfg.seed)
    model = model_for(config)
    optimizer = build_optimizer(model, train_cfg.optimizer)
    scheduler = build_scheduler(optimizer, train_cfg.schedule, train_cfg.max_steps)
    batches = iter(build_train_loader(data, batch_size=train_cfg.micro_batch_size, seed=train_cfg.seed))
    model.train()
    window_start, rates = time.perf_counter(), []
    with torch_threads(1):  # what Ray gives a worker with one CPU (OMP_NUM_THREADS=1)
        for step in range(1, train_cfg.max_steps + 1):
            clips, labels, _ = next(batches)
            clips = normalize_clips(clips, data.mean, data.std)
            loss = classification_loss(model(clips), labels, train_cfg.label_smoothing)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.gradient_clipping)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            loss.item()
            if step % LOG_EVERY == 0:
                now = time.perf_counter()
                rates.append(LOG_EVERY / (now - window_start))
                window_start = now
    return rates[1:], time.perf_counter() - start


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    stages, rounds = (QUICK_STAGES, 1) if quick else (FULL_STAGES, 2)
    max_steps = (3 if quick else 10) * LOG_EVERY
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-train-") as tmp:
        work = Path(tmp)
        configs = {stage: benchmark_config(work, max_steps, stage) for stage in stages}
        base = configs[stages[0]]
        # One epoch of the loader covers every step, so no loader restart falls inside a window.
        write_dataset(base, work, train_videos_per_class=max_steps * base.train.micro_batch_size // 8 + 1)
        start = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False)
        ray_start = time.perf_counter() - start
        try:
            bare, full = [bare_loop(base)], {stage: [] for stage in stages}
            for round_index, stage in itertools.product(range(rounds), stages):
                log.info("training overhead: full loop, ZeRO-%d, round %d", stage, round_index + 1)
                full[stage].append(full_loop(configs[stage], f"bench-zero{stage}-{round_index}"))
                log.info("training overhead: bare loop")
                bare.append(bare_loop(base))
        finally:
            ray.shutdown()
    return report(bare, full, ray_start, base, quick)


def findings(bare: Samples, full: dict[int, Samples]) -> list[str]:
    """What the figures show, stated from the measurements."""
    bare_ms = 1e3 / bare.median
    low, _, high = statistics.quantiles(bare.values, n=4)
    notes = [
        f"A bare step takes {fmt(bare_ms)} ms; the middle half of the bare windows spans {fmt(low)}-{fmt(high)} "
        "steps/s, the noise to read the ratios against.",
        "What the full loop adds per step is DeepSpeed's engine (forward, backward and step wrappers, "
        "gradient bookkeeping) and an MLflow log call per window; what it adds per run is starting the "
        "Ray worker group, the engine and the MLflow run, and the final validation and checkpoint.",
    ]
    for stage, samples in full.items():
        extra_ms = 1e3 / samples.median - bare_ms
        if low <= samples.median <= high:
            verdict = "inside the middle half of the bare windows: not distinguishable from noise"
        elif extra_ms < 0:
            verdict = (
                "faster than most bare windows: no per-step cost measurable. ZeRO-1 and 2 hand the optimizer "
                "one flat buffer instead of the bare loop's many tensors, which may make its step cheaper; "
                "this was not isolated"
                if stage
                else "faster than most bare windows: no per-step cost measurable"
            )
        else:
            verdict = "slower than most bare windows"
        notes.append(
            f"ZeRO-{stage}: {fmt(samples.median / bare.median, 2)}x the bare rate, {fmt(extra_ms, 2)} ms "
            f"({fmt(extra_ms / bare_ms * 100, 2)}% of a bare step) per step, {verdict}."
        )
    return notes


def report(
    bare: list[tuple[list[float], float]],
    full: dict[int, list[tuple[list[float], float]]],
    ray_start: float,
    config: PipelineConfig,
    quick: bool,
) -> BenchmarkResult:
    """Windows of all runs of a loop pooled; wall times as medians over its runs."""

    def pooled(runs: list[tuple[list[float], float]]) -> tuple[Samples, float]:
        return Samples(tuple(rate for rates, _ in runs for rate in rates)), statistics.median(
            w for _, w in runs
        )

    bare_rate, bare_wall = pooled(bare)
    rows = [["bare PyTorch (baseline)", fmt(bare_rate.median), "1.00", fmt(bare_wall), "0"]]
    raw: dict[str, object] = {"bare": {"steps_per_second": bare_rate, "wall_seconds": [w for _, w in bare]}}
    stage_rates = {}
    for stage, runs in full.items():
        stage_rates[stage], wall = pooled(runs)
        rows.append(
            [
                f"Ray + DeepSpeed ZeRO-{stage} + MLflow",
                fmt(stage_rates[stage].median),
                fmt(stage_rates[stage].median / bare_rate.median),
                fmt(wall),
                fmt(wall - bare_wall),
            ]
        )
        raw[f"zero{stage}"] = {"steps_per_second": stage_rates[stage], "wall_seconds": [w for _, w in runs]}
    raw["ray_init_seconds"] = ray_start
    train_cfg = config.train
    return BenchmarkResult(
        name="training_overhead",
        title="Training stack overhead",
        summary=(
            f"`{config.model.name}` on the synthetic dataset ({config.data.num_frames} frames at "
            f"{config.data.crop_size} px), {train_cfg.precision}, {train_cfg.micro_batch_size} clips per "
            f"step, {train_cfg.optimizer.name}, gradient clipping {train_cfg.gradient_clipping}, one "
            "DataLoader worker, one torch thread, one process (one Ray worker). Steps/s: median over "
            f"windows of {LOG_EVERY} steps after the first, pooled over runs; {train_cfg.max_steps} steps "
            f"per run; each full loop ran {len(next(iter(full.values())))} times and the bare loop "
            f"{len(bare)} times, alternating (bare first and between any two full runs). Wall time: median "
            "over runs of the whole run, for the full loop also starting the Ray worker and DeepSpeed engine, the MLflow run, and the "
            "validation and checkpoint after the last step; Ray itself was started once before, in "
            f"{fmt(ray_start)} s."
        ),
        inputs={"config": config.model_dump(mode="json"), "log_every": LOG_EVERY, "stages": list(full)},
        tables=[
            Table(
                "Steps per second, full stack against a bare loop",
                ["loop", "steps/s", "× bare", "wall s", "fixed cost s"],
                rows,
            )
        ],
        raw=raw,
        notes=findings(bare_rate, stage_rates),
        quick=quick,
    )
