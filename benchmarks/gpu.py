"""Issue 9.5: X-ViT B/16 training on one GPU: throughput, MFU, SDPA backends, memory per micro-batch.

    python -m benchmarks.gpu             # on a GPU machine, from the repository root (< 8 minutes)
    python -m benchmarks.gpu --smoke     # tiny sizes on whatever device there is (CPU here): checks the script

Needs only torch (>= 2.4) and this repository (`vidtx.models`, `benchmarks/`). Steps:

1. Peak: the best bf16 matmul rate over a few square sizes, the denominator of MFU.
2. Training steps of `xvit_b16_8x224` and `xvit_b16_16x224` (174 classes, random clips) in bf16
   autocast with fp32 weights, the fused attention path (SDPA, torch's choice of kernel), SGD with
   Nesterov momentum, for micro-batches 1, 2, 4, ... until memory runs out: clips/s, MFU
   (6 x forward MACs per clip x clips/s over the peak) and peak memory per micro-batch.
3. SDPA backends: the 8-frame step at one micro-batch with each backend forced (flash, memory-
   efficient, cuDNN, math) and with vidtx's explicit math path.
4. The trainer's knobs on the 8-frame model at that micro-batch (`benchmarks/training_knobs.py`):
   activation checkpointing on/off (activation memory, step time), compiled (inductor) against
   eager, the weight average's and the data-wait measurement's cost per step.

Writes `benchmarks/results/gpu.json` and `gpu.md` (with --smoke: `runs/bench-quick/`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks.results import REPO_ROOT, RESULTS_DIR, BenchmarkResult, Table, fmt, write_result
from benchmarks.timing import peak_memory, synchronize, torch_threads
from benchmarks.training_knobs import knob_tables, measure_knobs
from vidtx.models import count_flops, create_model

log = logging.getLogger("benchmarks.gpu")


@dataclass(frozen=True)
class Sizes:
    presets: dict[str, dict]  # label -> create_model(name, **overrides) arguments
    matmul_sizes: tuple[int, ...]
    micro_batches: tuple[int, ...]
    backend_micro_batch: int
    steps: int  # timed steps per measurement (after 2 warm-up steps)


REAL = Sizes(
    presets={
        "xvit_b16_8x224": {"name": "xvit_b16_8x224", "num_classes": 174},
        "xvit_b16_16x224": {"name": "xvit_b16_16x224", "num_classes": 174},
        "spatial_avg_b16_8x224": {"name": "spatial_avg_b16_8x224", "num_classes": 174},
    },
    matmul_sizes=(4096, 8192, 16384),
    micro_batches=(1, 2, 4, 8, 16, 32, 64, 128),
    backend_micro_batch=8,
    steps=10,
)
SMOKE = Sizes(
    presets={
        "xvit_tiny_8x56": {"name": "xvit_tiny", "num_frames": 8},
        "xvit_tiny_16x56": {"name": "xvit_tiny", "num_frames": 16},
        "spatial_avg_tiny_8x56": {"name": "spatial_avg_tiny", "num_frames": 8},
    },
    matmul_sizes=(128, 256),
    micro_batches=(1, 2),
    backend_micro_batch=1,
    steps=1,
)
BACKENDS = {  # getattr: torch builds without a backend's enum member (cuDNN) skip it
    label: getattr(SDPBackend, member)
    for label, member in (
        ("flash", "FLASH_ATTENTION"),
        ("memory-efficient", "EFFICIENT_ATTENTION"),
        ("cuDNN", "CUDNN_ATTENTION"),
        ("math (torch)", "MATH"),
    )
    if hasattr(SDPBackend, member)
}


def seconds_per_call(fn: Callable[[], object], device: torch.device, calls: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / calls


def matmul_peak(device: torch.device, sizes: tuple[int, ...]) -> dict[int, float]:
    """bf16 FLOP/s of an n x n x n matmul, per size."""
    rates = {}
    for n in sizes:
        a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
        calls = max(1, int(2e13 / (2 * n**3))) if device.type == "cuda" else 2
        rates[n] = 2 * n**3 / seconds_per_call(lambda a=a, b=b: a @ b, device, calls)
    return rates


class TrainingStep:
    """One optimizer step of a model on random clips, bf16 autocast, fp32 weights."""

    def __init__(self, model: torch.nn.Module, micro_batch: int, device: torch.device) -> None:
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, nesterov=True)
        shape = (micro_batch, 3, model.num_frames, model.img_size, model.img_size)
        self.clips = torch.randn(shape, device=device)
        self.labels = torch.randint(0, model.num_classes, (micro_batch,), device=device)
        self.device = device

    def __call__(self) -> None:
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            logits = self.model(self.clips)  # (B, num_classes)
        F.cross_entropy(logits.float(), self.labels).backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def peak_allocated(step: TrainingStep, device: torch.device) -> int:
    """Peak bytes allocated during a step: on CUDA everything (weights, optimizer state, activations,
    gradients); on the CPU (smoke test) only what the step allocates."""
    held = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    return held + peak_memory(step, device)


def out_of_memory(err: BaseException) -> bool:
    return isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err)


def sweep_micro_batches(
    model: torch.nn.Module, sizes: Sizes, device: torch.device, peak: float, deadline: float
) -> dict[int, dict]:
    """clips/s, MFU and peak memory per micro-batch, up to the first that does not fit (or the deadline)."""
    frames = (1, 3, model.num_frames, model.img_size, model.img_size)
    train_flops = 6 * count_flops(model, frames).total  # forward + backward = 3 forwards; 2 FLOPs per MAC
    results: dict[int, dict] = {}
    for micro_batch in sizes.micro_batches:
        if time.monotonic() > deadline:
            log.warning("time budget spent: stopping before micro-batch %d", micro_batch)
            break
        try:
            step = TrainingStep(model, micro_batch, device)
            seconds = seconds_per_call(step, device, sizes.steps)
            memory = peak_allocated(step, device)
        except RuntimeError as err:  # torch.cuda.OutOfMemoryError is one
            if not out_of_memory(err):
                raise
            results[micro_batch] = {"out_of_memory": True}
            break
        finally:
            model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        clips_per_second = micro_batch / seconds
        results[micro_batch] = {
            "step_seconds": seconds,
            "clips_per_second": clips_per_second,
            "mfu": clips_per_second * train_flops / peak,
            "peak_bytes": memory,
            "train_flops_per_clip": train_flops,
        }
        log.info("micro-batch %d: %.1f clips/s, peak %.2f GB", micro_batch, clips_per_second, memory / 1e9)
    return results


def compare_backends(arguments: dict, micro_batch: int, device: torch.device, steps: int) -> dict[str, dict]:
    """Step time of one model with each SDPA backend forced, and with vidtx's math path."""
    results: dict[str, dict] = {}
    for label, backend in [*BACKENDS.items(), ("math (vidtx)", None)]:
        impl = "math" if backend is None else "sdpa"
        torch.manual_seed(0)
        model = create_model(**arguments, attention_impl=impl).to(device)
        step = TrainingStep(model, micro_batch, device)
        try:
            with sdpa_kernel([backend] if backend is not None else list(BACKENDS.values())):
                seconds = seconds_per_call(step, device, steps)
                memory = peak_allocated(step, device)
            results[label] = {"step_seconds": seconds, "peak_bytes": memory}
        except RuntimeError as err:  # a backend that does not support this device, dtype or shape
            results[label] = {"error": str(err).splitlines()[0][:160]}
        del model, step
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def run(output_dir: Path, quick: bool = False, budget_seconds: float = 420.0) -> BenchmarkResult:
    """All measurements on the default device (CUDA when present); `quick` is the smoke test."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not quick:
        raise SystemExit("no GPU: run with --smoke to check the script on the CPU")
    with torch_threads(1) if device.type == "cpu" else contextlib.nullcontext():
        return measure(SMOKE if quick else REAL, device, time.monotonic() + budget_seconds, quick)


def measure(sizes: Sizes, device: torch.device, deadline: float, quick: bool) -> BenchmarkResult:
    log.info("matmul peak on %s", device)
    matmul = matmul_peak(device, sizes.matmul_sizes)
    peak = max(matmul.values())
    training = {}
    for label, arguments in sizes.presets.items():
        log.info("training %s", label)
        torch.manual_seed(0)
        model = create_model(**arguments).to(device)
        sweep = sweep_micro_batches(model, sizes, device, peak, deadline)
        fitted = {batch: result for batch, result in sweep.items() if "clips_per_second" in result}
        best = max(fitted, key=lambda batch: fitted[batch]["clips_per_second"])
        training[label] = {"micro_batches": sweep, "best_micro_batch": best, **fitted[best]}
        del model
    backend_model = next(iter(sizes.presets))
    backends = {}
    if time.monotonic() < deadline:
        log.info("SDPA backends on %s", backend_model)
        backends = compare_backends(
            sizes.presets[backend_model], sizes.backend_micro_batch, device, sizes.steps
        )
    knobs = {}
    if time.monotonic() < deadline:
        log.info("trainer knobs on %s", backend_model)
        knobs = measure_knobs(
            {backend_model: sizes.presets[backend_model]},
            device,
            repeats=max(sizes.steps, 2),
            micro_batch=sizes.backend_micro_batch,
            backend="aot_eager" if quick else "inductor",  # inductor's compile takes a minute on a CPU
        )
    result = report(sizes, device, matmul, training, backends, backend_model, quick)
    if knobs:
        result.tables += knob_tables(knobs, sizes.backend_micro_batch)
        result.raw["knobs"] = knobs
    return result


def mixing_cost(training: dict[str, dict]) -> list[str]:
    """X-ViT 8 frames against spatial-only attention (the first two 8-frame presets measured) at every
    micro-batch both fit: the paper's claim that the mixing costs nothing."""
    xvit = next((r for label, r in training.items() if label.startswith("xvit") and "8x" in label), None)
    spatial = next((r for label, r in training.items() if label.startswith("spatial_avg")), None)
    if xvit is None or spatial is None:
        return []
    ratios = [
        f"micro-batch {batch}: {ours['step_seconds'] / theirs['step_seconds']:.3f}x the time, "
        f"{ours['peak_bytes'] / theirs['peak_bytes']:.3f}x the peak memory"
        for batch, ours in xvit["micro_batches"].items()
        if not ours.get("out_of_memory")
        and not (theirs := spatial["micro_batches"].get(batch, {"out_of_memory": True})).get("out_of_memory")
    ]
    return ["X-ViT 8 frames against spatial-only attention + averaging: " + "; ".join(ratios) + "."]


def report(
    sizes: Sizes,
    device: torch.device,
    matmul: dict[int, float],
    training: dict[str, dict],
    backends: dict[str, dict],
    backend_model: str,
    quick: bool,
) -> BenchmarkResult:
    peak = max(matmul.values())
    sweep_rows = []
    for label, result in training.items():
        for batch, measured in result["micro_batches"].items():
            if measured.get("out_of_memory"):
                sweep_rows.append([label, str(batch), "out of memory", "", "", ""])
                continue
            sweep_rows.append(
                [
                    label + (" (best)" if batch == result["best_micro_batch"] else ""),
                    str(batch),
                    fmt(measured["step_seconds"] * 1e3),
                    fmt(measured["clips_per_second"]),
                    f"{measured['mfu']:.1%}",
                    fmt(measured["peak_bytes"] / 1e9),
                ]
            )
    reference = backends.get("flash", {}).get("step_seconds")
    backend_rows = [
        [label, "unavailable: " + measured["error"], "", ""]
        if "error" in measured
        else [
            label,
            fmt(measured["step_seconds"] * 1e3),
            fmt(measured["step_seconds"] / reference) if reference else "",
            fmt(measured["peak_bytes"] / 1e9),
        ]
        for label, measured in backends.items()
    ]
    return BenchmarkResult(
        notes=mixing_cost(training),
        name="gpu",
        title="X-ViT B/16 training on one GPU"
        if not quick
        else "GPU script smoke test on the CPU (tiny sizes, not a GPU result)",
        summary=(
            f"Device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}. Random clips, "
            "bf16 autocast with fp32 weights, fused attention (SDPA, torch's choice of kernel), SGD with "
            f"Nesterov momentum; {sizes.steps} timed steps after 2 warm-up steps. MFU = clips/s x 6 x forward "
            f"MACs per clip / the measured bf16 matmul peak ({fmt(peak / 1e12)} TFLOP/s). Peak memory: the most "
            "bytes allocated during a step, weights and optimizer state included (CUDA; the CPU smoke test "
            "counts only what the step allocates)."
        ),
        inputs={"sizes": sizes.__dict__, "device": str(device)},
        tables=[
            Table(
                "bf16 matmul rate (the peak for MFU)",
                ["n (n x n x n)", "TFLOP/s"],
                [[str(n), fmt(rate / 1e12)] for n, rate in matmul.items()],
            ),
            Table(
                "Training step per micro-batch",
                ["model", "micro-batch", "ms / step", "clips/s", "MFU", "peak GB"],
                sweep_rows,
            ),
            Table(
                f"SDPA backends forced, {backend_model}, micro-batch {sizes.backend_micro_batch}",
                ["attention", "ms / step", "× flash", "peak GB"],
                backend_rows,
            ),
        ],
        raw={"matmul_flops": matmul, "training": training, "sdpa_backends": backends},
        quick=quick,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes on any device: checks the script only"
    )
    parser.add_argument(
        "--output", type=Path, help=f"results folder (default {RESULTS_DIR}; --smoke: runs/bench-quick)"
    )
    parser.add_argument(
        "--budget-seconds", type=float, default=420.0, help="stop starting new measurements after this"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    output_dir = args.output or (REPO_ROOT / "runs" / "bench-quick" if args.smoke else RESULTS_DIR)
    result = run(output_dir, quick=args.smoke, budget_seconds=args.budget_seconds)
    json_path, md_path = write_result(result, output_dir)
    log.info("wrote %s and %s", json_path, md_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
