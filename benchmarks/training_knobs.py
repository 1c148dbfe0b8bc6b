"""Issue 45: what the trainer's knobs cost and save, on one process (CPU here; `benchmarks/gpu.py` runs
the same measurements on a GPU).

- Activation checkpointing (`train.activation_checkpointing=1`) against none: the activation memory
  (the peak bytes of tensors during the forward pass of a training step, everything kept for the
  backward pass included) and the time of a whole step (forward, backward, AdamW).
- `torch.compile` (inductor, mode "default") against eager: steps/s after the compile (its one-off
  time is reported apart).
- The weight average (`train.ema`): one update's time over a step's; and the data-wait measurement
  (two clock reads and an addition per micro-batch) over a step's.

Random clips, fp32 on the CPU (bf16 autocast on CUDA), one torch thread on the CPU (see
`benchmarks.timing.torch_threads`); step times are interleaved medians, ratios per round.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import peak_memory, round_ratios, time_interleaved, torch_threads
from vidtx.models import create_model
from vidtx.train.ema import WeightAverage
from vidtx.train.throughput import ThroughputMeter

log = logging.getLogger(__name__)

REAL = {"xvit_b16_8x224": {"name": "xvit_b16_8x224", "num_classes": 174}, "xvit_tiny": {"name": "xvit_tiny"}}
QUICK = {"xvit_tiny_4x32": {"name": "xvit_tiny", "num_frames": 4, "img_size": 32}}


class Step:
    """One training step of `model` on a fixed random batch: forward, loss, backward, AdamW."""

    def __init__(self, model: torch.nn.Module, micro_batch: int, device: torch.device) -> None:
        self.model, self.device = model, device
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        shape = (micro_batch, 3, model.num_frames, model.img_size, model.img_size)
        self.clips = torch.randn(shape, device=device)  # (B, C, T, H, W)
        self.labels = torch.randint(0, model.num_classes, (micro_batch,), device=device)

    def loss(self) -> torch.Tensor:
        autocast = (
            torch.autocast("cuda", torch.bfloat16) if self.device.type == "cuda" else contextlib.nullcontext()
        )
        with autocast:
            logits = self.model(self.clips)  # (B, num_classes)
        return F.cross_entropy(logits.float(), self.labels)

    def forward(self) -> None:
        """The forward pass alone, its graph kept until it returns (what a backward pass would need)."""
        self.loss()

    def __call__(self) -> None:
        self.loss().backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def checkpointing(arguments: dict, micro_batch: int, device: torch.device, repeats: int) -> dict:
    """Activation memory and step time without and with every block checkpointed."""
    steps = {}
    for every in (0, 1):
        torch.manual_seed(0)
        model = create_model(**arguments).to(device)
        model.set_activation_checkpointing(every)
        steps["on" if every else "off"] = Step(model, micro_batch, device)
    memory = {label: peak_memory(step.forward, device) for label, step in steps.items()}
    times = time_interleaved(steps, warmup=1, repeats=repeats, device=device)
    return {
        "activation_bytes": memory,
        "step_seconds": {label: samples.to_json() for label, samples in times.items()},
        "memory_ratio": memory["on"] / memory["off"],
        "time_ratio": round_ratios(times["on"], times["off"]).median,
    }


def compiled(
    arguments: dict, micro_batch: int, device: torch.device, repeats: int, backend: str = "inductor"
) -> dict:
    """Steps/s of the eager model and of `torch.compile(model, backend=backend)`; the compile's first
    step timed apart."""
    torch.manual_seed(0)
    eager = create_model(**arguments).to(device)
    torch.manual_seed(0)
    model = create_model(**arguments).to(device)
    compiled_step = Step(torch.compile(model, backend=backend), micro_batch, device)
    started = time.perf_counter()
    compiled_step()  # compiles forward and backward
    first_step = time.perf_counter() - started
    times = time_interleaved(
        {"eager": Step(eager, micro_batch, device), "compiled": compiled_step},
        warmup=1,
        repeats=repeats,
        device=device,
    )
    return {
        "backend": backend,
        "first_compiled_step_seconds": first_step,
        "step_seconds": {label: samples.to_json() for label, samples in times.items()},
        "speedup": round_ratios(times["eager"], times["compiled"]).median,
    }


def per_step_costs(arguments: dict, micro_batch: int, device: torch.device, repeats: int) -> dict:
    """The weight average's update and the data-wait bookkeeping, each over one step's time."""
    torch.manual_seed(0)
    model = create_model(**arguments).to(device)
    step = Step(model, micro_batch, device)
    ema = WeightAverage(model, 0.9999)
    meter = ThroughputMeter(1, None, None)

    def data_wait_bookkeeping() -> None:
        asked = time.perf_counter()
        meter.waited(time.perf_counter() - asked)

    times = time_interleaved(
        {"step": step, "ema_update": ema.update, "data_wait": data_wait_bookkeeping},
        warmup=1,
        repeats=repeats,
        device=device,
    )
    return {
        "step_seconds": times["step"].median,
        "ema_fraction": round_ratios(times["ema_update"], times["step"]).median,
        "data_wait_fraction": round_ratios(times["data_wait"], times["step"]).median,
    }


def measure_knobs(
    presets: dict[str, dict],
    device: torch.device,
    repeats: int,
    micro_batch: int = 1,
    backend: str = "inductor",
) -> dict:
    """Every measurement for every preset (`create_model` arguments by label); `backend` compiles."""
    results = {}
    for label, arguments in presets.items():
        log.info("%s: checkpointing, compile (%s), per-step costs", label, backend)
        results[label] = {
            "checkpointing": checkpointing(arguments, micro_batch, device, repeats),
            "compile": compiled(arguments, micro_batch, device, repeats, backend),
            "costs": per_step_costs(arguments, micro_batch, device, repeats),
        }
    return results


def knob_tables(results: dict, micro_batch: int) -> list[Table]:
    checkpoint_rows, compile_rows, cost_rows = [], [], []
    for label, measured in results.items():
        ckpt, comp, costs = measured["checkpointing"], measured["compile"], measured["costs"]
        checkpoint_rows.append([
            label,
            fmt(ckpt["activation_bytes"]["off"] / 1e6),
            fmt(ckpt["activation_bytes"]["on"] / 1e6),
            fmt(ckpt["memory_ratio"]),
            fmt(ckpt["step_seconds"]["off"]["median"]),
            fmt(ckpt["time_ratio"]),
        ])  # fmt: skip
        compile_rows.append([
            label,
            fmt(1 / comp["step_seconds"]["eager"]["median"]),
            fmt(1 / comp["step_seconds"]["compiled"]["median"]),
            fmt(comp["speedup"]),
            fmt(comp["first_compiled_step_seconds"]),
        ])  # fmt: skip
        cost_rows.append([
            label, fmt(costs["step_seconds"]), f"{costs['ema_fraction']:.2%}", f"{costs['data_wait_fraction']:.4%}"
        ])  # fmt: skip
    return [
        Table(
            f"Activation checkpointing (every block), micro-batch {micro_batch}",
            [
                "model",
                "activations MB (off)",
                "activations MB (on)",
                "× memory",
                "s / step (off)",
                "× step time",
            ],
            checkpoint_rows,
        ),
        Table(
            f"torch.compile ({next(iter(results.values()))['compile']['backend']}) against eager, micro-batch {micro_batch}",
            ["model", "steps/s eager", "steps/s compiled", "× speed", "first compiled step s"],
            compile_rows,
        ),
        Table(
            "Per-step costs of the weight average and the data-wait measurement",
            ["model", "s / step", "EMA update / step", "data-wait bookkeeping / step"],
            cost_rows,
        ),
    ]


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    device = torch.device("cpu")
    presets, repeats = (QUICK, 2) if quick else (REAL, 3)
    with torch_threads(1):
        results = measure_knobs(presets, device, repeats)
    return BenchmarkResult(
        name="training_knobs",
        title="The trainer's knobs on the CPU: activation checkpointing, torch.compile, EMA, data wait",
        summary=__doc__.split("\n\n", 1)[1].strip(),
        inputs={"presets": presets, "repeats": repeats, "micro_batch": 1, "device": str(device)},
        tables=knob_tables(results, micro_batch=1),
        raw=results,
        quick=quick,
    )
