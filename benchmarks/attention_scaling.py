"""Issue 9.1: how training cost grows with the number of frames T for each way of attending in time.

Five models of the same width and depth (the `*_tiny` presets at 224 px with 16 px patches, so every
frame has 196 + 1 tokens as in B/16): spatial-only (the baseline), X-ViT, TimeSformer (divided),
ViViT factorised encoder and joint space-time. For every T, one forward + backward of one clip,
interleaved over the models; peak memory per clip from torch's allocator events. The cost of the
B/16 presets at the same T (GMACs per view, counted on the meta device) is listed beside it.
"""

from __future__ import annotations

import logging
import math
from functools import partial
from pathlib import Path

import torch

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import peak_memory, time_interleaved, torch_threads
from vidtx.models import create_model, model_info

log = logging.getLogger(__name__)

BASELINE = "spatial_avg"
MODELS = {  # label -> (tiny preset, B/16 preset for the GMAC column)
    "spatial_avg": ("spatial_avg_tiny", "spatial_avg_b16_8x224"),
    "xvit": ("xvit_tiny", "xvit_b16_8x224"),
    "timesformer": ("timesformer_tiny", "timesformer_b16_8x224"),
    "vivit_fe": ("vivit_fe_tiny", "vivit_fe_b16_8x224"),
    "joint": ("joint_tiny", "joint_b16_8x224"),
}
# ViT-Ti width (3 heads of 64 channels, the head size of B/16) and 4 layers keep T = 32 tractable on
# one CPU core while the attention sequences have B/16's length.
SHAPE = {"img_size": 224, "patch_size": 16, "embed_dim": 192, "num_heads": 3, "depth": 4, "num_classes": 10}
FRAMES = (2, 4, 8, 16, 32)
QUICK_FRAMES = (2, 4, 8)


def training_step(model: torch.nn.Module, clips: torch.Tensor) -> None:
    """Forward + backward; the gradient of a random linear function of the logits stands in for a
    loss (a constant upstream gradient would be unrealistically easy for the backward kernels)."""
    model.zero_grad(set_to_none=True)
    logits = model(clips)  # (1, num_classes)
    logits.backward(torch.randn_like(logits))


def exponent(frames: tuple[int, ...], values: list[float]) -> float:
    """Local growth exponent k of cost ~ T^k between the two largest T."""
    return math.log(values[-1] / values[-2]) / math.log(frames[-1] / frames[-2])


def plot(
    path: Path, frames: tuple[int, ...], seconds: dict[str, list[float]], mbytes: dict[str, list[float]]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, series, label in (
        (axes[0], seconds, "seconds per clip"),
        (axes[1], mbytes, "peak MB per clip"),
    ):
        for name, values in series.items():
            axis.plot(frames, values, marker="o", label=name)
        axis.set(xscale="log", yscale="log", xlabel="frames T", ylabel=label, xticks=frames)
        axis.set_xticklabels([str(t) for t in frames])
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_title("forward + backward time")
    axes[1].set_title("peak tensor memory")
    axes[1].legend()
    figure.suptitle("Training cost against T (width 192, depth 4, 197 tokens per frame, 1 CPU thread)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def measure(frames: tuple[int, ...], repeats: int) -> dict[str, dict[int, dict]]:
    """Per model and T: step time samples, peak bytes, B/16 GMACs."""
    measured: dict[str, dict[int, dict]] = {name: {} for name in MODELS}
    for num_frames in frames:
        clips = torch.randn(1, 3, num_frames, SHAPE["img_size"], SHAPE["img_size"])
        models = {
            name: create_model(tiny, num_frames=num_frames, **SHAPE) for name, (tiny, _) in MODELS.items()
        }
        steps = {name: partial(training_step, model, clips) for name, model in models.items()}
        log.info("attention scaling: T=%d", num_frames)
        timings = time_interleaved(steps, warmup=1, repeats=repeats)
        for name, (_, b16) in MODELS.items():
            measured[name][num_frames] = {
                "seconds": timings[name],
                "peak_bytes": peak_memory(steps[name]),
                "b16_gmacs": model_info(b16, num_frames=num_frames)["gflops"],
            }
    return measured


def findings(
    frames: tuple[int, ...], seconds: dict[str, list[float]], mbytes: dict[str, list[float]]
) -> list[str]:
    """What the figures show, stated from the measurements."""
    xvit = [x / s for x, s in zip(seconds["xvit"], seconds[BASELINE], strict=True)]
    joint = exponent(frames, seconds["joint"])
    return [
        f"X-ViT takes {fmt(min(xvit), 2)}-{fmt(max(xvit), 2)}× the time of spatial-only attention over "
        f"T = {frames[0]}-{frames[-1]}: its keys and values are shifted copies, so each frame still "
        "attends over 197 tokens and the cost per frame does not depend on T.",
        f"Joint space-time attention grows as T^{fmt(joint, 2)} in time and "
        f"T^{fmt(exponent(frames, mbytes['joint']), 2)} in memory between T = {frames[-2]} and {frames[-1]}; "
        "its attention is quadratic in T, and the exponent approaches 2 as the attention outgrows the "
        "projections and MLP, which stay linear in T.",
        f"TimeSformer grows as T^{fmt(exponent(frames, seconds['timesformer']), 2)} and ViViT-FE as "
        f"T^{fmt(exponent(frames, seconds['vivit_fe']), 2)}: their temporal attention runs over T tokens per "
        "patch (TimeSformer) or T/2 steps of one token (ViViT-FE), short next to the 197-token spatial "
        "attention.",
    ]


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    frames = QUICK_FRAMES if quick else FRAMES
    repeats = 2 if quick else 3
    torch.manual_seed(0)
    with torch_threads(1):
        measured = measure(frames, repeats)
    seconds = {name: [measured[name][t]["seconds"].median for t in frames] for name in MODELS}
    mbytes = {name: [measured[name][t]["peak_bytes"] / 1e6 for t in frames] for name in MODELS}
    rows = [
        [
            name,
            str(t),
            fmt(seconds[name][i] * 1e3),
            fmt(seconds[name][i] / seconds[BASELINE][i]),
            fmt(mbytes[name][i]),
            fmt(mbytes[name][i] / mbytes[BASELINE][i]),
            fmt(measured[name][t]["b16_gmacs"]),
        ]
        for i, t in enumerate(frames)
        for name in MODELS
    ]
    growth = [
        [name, fmt(exponent(frames, seconds[name]), 2), fmt(exponent(frames, mbytes[name]), 2)]
        for name in MODELS
    ]
    figure = "attention_scaling.png"
    plot(output_dir / figure, frames, seconds, mbytes)
    return BenchmarkResult(
        name="attention_scaling",
        title="Attention scaling with the number of frames",
        summary=(
            "Forward + backward of one clip per model, fp32, fused attention (SDPA), one CPU thread; "
            f"width {SHAPE['embed_dim']}, {SHAPE['num_heads']} heads, depth {SHAPE['depth']}, "
            f"{SHAPE['img_size']} px with {SHAPE['patch_size']} px patches (197 tokens per frame, as in "
            f"B/16). Median of {repeats} interleaved repeats after a warm-up; peak memory is the peak of "
            "live tensor bytes during the step (torch profiler allocator events). Ratios are against "
            "spatial-only attention at the same T, measured in the same rounds. The last column is the "
            "forward cost of the B/16 preset of the same model at that T, counted on the meta device."
        ),
        inputs={
            "models": MODELS,
            "shape": SHAPE,
            "frames": frames,
            "repeats": repeats,
            "batch": 1,
            "threads": 1,
        },
        tables=[
            Table(
                "Cost per clip",
                ["model", "T", "ms / clip", "× spatial-only", "peak MB", "× spatial-only", "B/16 GMACs"],
                rows,
            ),
            Table(
                f"Growth exponent k (cost ∝ T^k) between T = {frames[-2]} and {frames[-1]}",
                ["model", "time", "memory"],
                growth,
            ),
        ],
        raw={name: {str(t): values for t, values in per_t.items()} for name, per_t in measured.items()},
        notes=findings(frames, seconds, mbytes),
        figures=[figure],
        quick=quick,
    )
