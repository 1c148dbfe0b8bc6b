"""Issue 9.2: fused attention (torch's SDPA) against the explicit math path softmax(QKᵀ/√d)V.

Both through `vidtx.nn.attention.scaled_dot_product_attention` (impl="sdpa" / "math"), with B/16's
12 heads of 64 channels, at the sequence lengths the models use: 197 tokens per frame (X-ViT,
spatial-only, TimeSformer's spatial step; 8 frames of a clip side by side) and T x 196 + 1 tokens
for joint space-time attention at 8 and 16 frames; fp32 and bf16. Forward and forward + backward
time, interleaved; peak memory of forward + backward.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import peak_memory, time_interleaved, torch_threads
from vidtx.nn.attention import scaled_dot_product_attention

log = logging.getLogger(__name__)

HEADS, HEAD_DIM = 12, 64
CASES = {  # label -> (sequences, tokens): the q/k/v shape is (sequences, HEADS, tokens, HEAD_DIM)
    "per frame, 8 frames x 197": (8, 197),
    "joint, 8 x 196 + 1": (1, 8 * 196 + 1),
    "joint, 16 x 196 + 1": (1, 16 * 196 + 1),
}
QUICK_CASES = ("per frame, 8 frames x 197", "joint, 8 x 196 + 1")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
IMPLS = ("math", "sdpa")  # the first is the baseline


def attention_inputs(sequences: int, tokens: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """q, k, v (sequences, heads, tokens, head_dim) that need gradients, and an upstream gradient."""
    shape = (sequences, HEADS, tokens, HEAD_DIM)
    q, k, v = (torch.randn(shape, dtype=dtype, requires_grad=True) for _ in range(3))
    return q, k, v, torch.randn(shape, dtype=dtype)


def forward(impl: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor) -> None:
    with torch.no_grad():
        scaled_dot_product_attention(q, k, v, impl=impl)


def forward_backward(
    impl: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor
) -> None:
    for tensor in (q, k, v):
        tensor.grad = None
    scaled_dot_product_attention(q, k, v, impl=impl).backward(grad)


def fused_kernel(inputs: tuple[torch.Tensor, ...]) -> str:
    """The aten attention operator torch dispatches the fused path to."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        forward_backward("sdpa", *inputs)
    names = {event.key for event in profiler.key_averages()}
    kernels = sorted(name for name in names if "scaled_dot_product" in name and "_attention" in name)
    return ", ".join(kernels) or "unknown"


def measure_case(sequences: int, tokens: int, dtype: torch.dtype, repeats: int) -> dict:
    inputs = attention_inputs(sequences, tokens, dtype)
    passes = {"forward": forward, "forward_backward": forward_backward}
    candidates = {
        f"{impl}/{name}": partial(fn, impl, *inputs) for impl in IMPLS for name, fn in passes.items()
    }
    timings = time_interleaved(candidates, warmup=1, repeats=repeats)
    return {
        "seconds": timings,
        "peak_bytes": {impl: peak_memory(partial(forward_backward, impl, *inputs)) for impl in IMPLS},
        "kernel": fused_kernel(inputs),
    }


def findings(raw: dict[str, dict]) -> list[str]:
    """What the figures show, stated from the measurements."""

    def median(key: str, candidate: str) -> float:
        return raw[key]["seconds"][candidate].median

    notes = []
    for dtype_name in DTYPES:
        keys = [key for key in raw if key.endswith(f"/{dtype_name}")]
        speedups = [median(k, "math/forward_backward") / median(k, "sdpa/forward_backward") for k in keys]
        savings = [raw[k]["peak_bytes"]["math"] / raw[k]["peak_bytes"]["sdpa"] for k in keys]
        notes.append(
            f"{dtype_name}: forward + backward with SDPA is {fmt(min(speedups), 2)}-{fmt(max(speedups), 2)}x "
            f"as fast as the math path and needs {fmt(min(savings), 2)}-{fmt(max(savings), 2)}x less memory."
        )
    longest = max(raw, key=lambda key: raw[key]["peak_bytes"]["math"])
    notes.append(
        f"Memory: at {longest.split('/')[0]} ({longest.split('/')[1]}) the math path peaks at "
        f"{fmt(raw[longest]['peak_bytes']['math'] / 1e6)} MB against {fmt(raw[longest]['peak_bytes']['sdpa'] / 1e6)} "
        "MB: it stores the tokens x tokens attention weights for the backward pass, the fused kernel keeps "
        "only the output and one log-sum-exp per row, so its memory grows linearly with the sequence."
    )
    labels = sorted({key.split("/")[0] for key in raw}, key=list(CASES).index)
    per_dtype = {
        impl: [
            median(f"{label}/bf16", f"{impl}/forward_backward")
            / median(f"{label}/fp32", f"{impl}/forward_backward")
            for label in labels
        ]
        for impl in IMPLS
    }
    math_wins = [
        label
        for label in labels
        if median(f"{label}/bf16", "math/forward_backward") < median(f"{label}/bf16", "sdpa/forward_backward")
    ]
    notes.append(
        f"bf16 against fp32 on this CPU: the math path takes {fmt(min(per_dtype['math']), 2)}-"
        f"{fmt(max(per_dtype['math']), 2)}x its fp32 time, the fused kernel {fmt(min(per_dtype['sdpa']), 2)}-"
        f"{fmt(max(per_dtype['sdpa']), 2)}x"
        + (f", so in bf16 the math path trains faster at {'; '.join(math_wins)}" if math_wins else "")
        + ". This CPU (AVX2, no native bf16 instructions) says nothing about GPUs, where "
        "benchmarks/gpu.py compares the SDPA backends."
    )
    return notes


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    cases = {label: CASES[label] for label in QUICK_CASES} if quick else CASES
    repeats = 2 if quick else 3
    torch.manual_seed(0)
    raw, rows = {}, []
    with torch_threads(1):
        for label, (sequences, tokens) in cases.items():
            for dtype_name, dtype in DTYPES.items():
                log.info("attention kernels: %s, %s", label, dtype_name)
                case = measure_case(sequences, tokens, dtype, repeats)
                raw[f"{label}/{dtype_name}"] = case
                seconds = {name: samples.median for name, samples in case["seconds"].items()}
                memory = case["peak_bytes"]
                rows.append(
                    [
                        label,
                        dtype_name,
                        fmt(seconds["math/forward"] * 1e3),
                        fmt(seconds["sdpa/forward"] * 1e3),
                        fmt(seconds["math/forward"] / seconds["sdpa/forward"]),
                        fmt(seconds["math/forward_backward"] * 1e3),
                        fmt(seconds["sdpa/forward_backward"] * 1e3),
                        fmt(seconds["math/forward_backward"] / seconds["sdpa/forward_backward"]),
                        fmt(memory["math"] / 1e6),
                        fmt(memory["sdpa"] / 1e6),
                        fmt(memory["math"] / memory["sdpa"]),
                    ]
                )
    kernels = sorted({case["kernel"] for case in raw.values()})
    return BenchmarkResult(
        name="attention_kernels",
        title="Fused (SDPA) against math attention",
        summary=(
            f"q, k, v of {HEADS} heads x {HEAD_DIM} channels at the models' sequence lengths, one CPU "
            f"thread; median of {repeats} interleaved repeats after a warm-up. Forward without gradients; "
            "forward + backward with a random upstream gradient; peak memory is the peak of live tensor "
            "bytes during forward + backward (torch profiler allocator events), inputs excluded. "
            "Speed-up = math time / SDPA time; memory saving = math peak / SDPA peak. "
            f"The fused path ran {'; '.join(kernels)}."
        ),
        inputs={
            "cases": cases,
            "heads": HEADS,
            "head_dim": HEAD_DIM,
            "dtypes": list(DTYPES),
            "repeats": repeats,
        },
        tables=[
            Table(
                "Time (ms) and peak memory (MB) per call",
                [
                    "sequences",
                    "dtype",
                    "fwd math",
                    "fwd SDPA",
                    "speed-up",
                    "fwd+bwd math",
                    "fwd+bwd SDPA",
                    "speed-up",
                    "MB math",
                    "MB SDPA",
                    "memory saving",
                ],
                rows,
            )
        ],
        raw=raw,
        notes=findings(raw),
        quick=quick,
    )
