"""Issue 46: what Ray Tune adds to a training, and what running trials side by side gains.

Each candidate trains the demo config (the tiny X-ViT on the synthetic dataset, 2 Ray workers of 0.49
CPU, fp32) for the same steps on one local Ray (2 CPUs) started once for all of them:
- a single training (`vidtx.stages.train.train`), the baseline;
- a sweep of one trial (`vidtx.stages.sweep.build_tuner`'s Tuner over the same trainer): its wall
  time less the baseline's is Tune's fixed cost per trial (the trial's actor, its report queue, the
  experiment state it writes);
- 4 trials one after another, and the same 4 trials 2 at a time (no early stopping): the ratio is
  what running trials side by side gains on 2 cores.
Wall times of the trainings themselves (Tuner.fit, train): no evaluation or registration.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.training_overhead import demo_config, write_dataset
from vidtx.config import PipelineConfig
from vidtx.ray_session import ray_session, tune_trial_environment
from vidtx.stages.sweep import build_tuner
from vidtx.stages.sweep_trial import SweepPlan
from vidtx.stages.train import train
from vidtx.tracking.runs import connect, resolve_tracking_uri
from vidtx.tracking.sweeps import start_sweep_run

log = logging.getLogger(__name__)

LEARNING_RATES = [1e-3, 2e-3, 5e-4, 3e-3]


def sweep_config(work: Path, max_steps: int, learning_rates: list[float], at_once: int) -> PipelineConfig:
    return demo_config(
        work,
        max_steps,
        [
            "train.cpus_per_worker=0.49",
            f"sweep.space={{train.optimizer.lr: {{grid: {learning_rates}}}}}",
            "sweep.num_trials=1",
            f"sweep.max_concurrent={at_once}",
            "sweep.scheduler.name=none",
        ],
    )


def timed_sweep(config: PipelineConfig, name: str) -> float:
    """Wall seconds of the Tuner's fit for `config`'s sweep, on the Ray already started."""
    client = connect(resolve_tracking_uri(config))
    plan = SweepPlan(
        config=config.with_absolute_paths(),
        sweep_name=name,
        parent_run_id=start_sweep_run(client, config, name),
        tracking_uri=resolve_tracking_uri(config),
    )
    start = time.perf_counter()
    with tune_trial_environment():
        build_tuner(plan, str(config.train.storage_path), autoscaling=False).fit()
    return time.perf_counter() - start


def notes(seconds: dict[str, float], per_trial: float, max_steps: int) -> list[str]:
    """What the figures say: Tune's cost per trial, and what two trials at once gained (or not)."""
    ratio = seconds["4, 2 at a time"] / seconds["4 one after another"]
    gain = "no gain" if abs(1 - ratio) < 0.05 else f"{fmt(1 / ratio)}x as fast"
    return [
        f"Ray Tune's fixed cost per trial: {fmt(per_trial)} s over a {fmt(seconds['train'])} s training "
        f"of {max_steps} steps ({fmt(100 * per_trial / seconds['train'])}%).",
        f"4 trials 2 at a time took {fmt(ratio)}x the wall time of the same 4 one after another ({gain}): "
        "on these 2 cores the two trials' 4 workers share the same CPUs, so the work is the same and "
        "only start-up overlaps. Trials at once pay where the cluster has room for more than one "
        "trial's workers (`sweep.max_concurrent`, default: as many as fit).",
    ]


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    max_steps = 8 if quick else 24
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-sweeps-") as tmp:
        work = Path(tmp)
        write_dataset(sweep_config(work, max_steps, LEARNING_RATES[:1], 1), work, train_videos_per_class=8)
        seconds: dict[str, float] = {}
        with ray_session(num_cpus=2):
            single = sweep_config(work, max_steps, LEARNING_RATES[:1], 1)
            start = time.perf_counter()
            train(single, run_name="single")
            seconds["train"] = time.perf_counter() - start
            log.info("sweeps: one training of %d steps: %.1f s", max_steps, seconds["train"])
            seconds["sweep of 1"] = timed_sweep(single, "one-trial")
            seconds["4 one after another"] = timed_sweep(
                sweep_config(work, max_steps, LEARNING_RATES, 1), "serial"
            )
            seconds["4, 2 at a time"] = timed_sweep(
                sweep_config(work, max_steps, LEARNING_RATES, 2), "parallel"
            )
            log.info("sweeps: %s", seconds)
    per_trial = seconds["sweep of 1"] - seconds["train"]
    speedup = seconds["4 one after another"] / seconds["4, 2 at a time"]
    rows = [
        ["one training (train())", fmt(seconds["train"]), "1"],
        ["a sweep of that one trial (Tuner.fit)", fmt(seconds["sweep of 1"]), fmt(seconds["sweep of 1"] / seconds["train"])],
        ["4 trials, one after another", fmt(seconds["4 one after another"]), fmt(seconds["4 one after another"] / seconds["train"])],
        ["4 trials, 2 at a time", fmt(seconds["4, 2 at a time"]), fmt(seconds["4, 2 at a time"] / seconds["train"])],
    ]  # fmt: skip
    return BenchmarkResult(
        name="sweeps",
        title="Sweeps: Ray Tune's cost per trial, and trials side by side",
        summary=__doc__.split("\n\n", 1)[1].strip(),
        inputs={
            "max_steps": max_steps,
            "learning_rates": LEARNING_RATES,
            "workers": 2,
            "cpus_per_worker": 0.49,
        },
        tables=[Table("Wall time (s) and ratio to one training", ["candidate", "seconds", "ratio"], rows)],
        raw={"seconds": seconds, "tune_seconds_per_trial": per_trial, "serial_over_parallel": speedup},
        notes=notes(seconds, per_trial, max_steps),
        quick=quick,
    )
