"""Run the CPU benchmarks and rebuild `benchmarks/results/README.md`.

    python -m benchmarks.run                      # every benchmark in BENCHMARKS (what `make bench` runs)
    python -m benchmarks.run attention_kernels    # some of them
    python -m benchmarks.run --quick              # smaller sizes, fewer repeats; writes to runs/bench-quick/

A benchmark is a module `benchmarks/<name>.py` with a function
`run(output_dir: Path, quick: bool = False) -> BenchmarkResult`; listing its name in `BENCHMARKS` adds
it to the set. Each result is written to `<output>/<name>.json` and `<name>.md` (figures beside
them), then the folder's README gathers every table, including those of `benchmarks/gpu.py` when a
GPU run was committed. A benchmark that fails is reported and the others still run; the exit code
is then 1.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
from pathlib import Path

from benchmarks.results import REPO_ROOT, RESULTS_DIR, write_index, write_result
from vidtx.env import apply_defaults
from vidtx.log import setup_logging

BENCHMARKS = [
    "attention_scaling",
    "attention_kernels",
    "data_loading",
    "reencode_settings",
    "frames_store",
    "object_storage",
    "bucket_latency",
    "storage_clients",
    "sharding",
    "shard_ray",
    "training_overhead",
    "training_knobs",
    "temporal_reasoning",
    "demo_augmentation",
    "sweeps",
    "pretraining",
    "pretraining_gain",
    "onnx_runtime",
    "long_videos",
    "multilabel_map",
]
QUICK_DIR = REPO_ROOT / "runs" / "bench-quick"
INDEX_HEADER = (
    "# Benchmark results",
    "Written by `make bench` (`python -m benchmarks.run`; CPU set) and `python -m benchmarks.gpu` (on a "
    "GPU machine). Every figure was measured by the code in `benchmarks/`, on the machine named under "
    "its table; ratios compare candidates measured in the same run. The machine was shared with other "
    "jobs, so absolute times are noisy and the ratios are the figures to read.",
)

log = logging.getLogger("benchmarks")


def run_benchmarks(names: list[str], output_dir: Path, quick: bool) -> list[str]:
    """Run, write and index the named benchmarks; returns the names of those that failed."""
    failed = []
    for name in names:
        log.info("running %s%s", name, " (quick)" if quick else "")
        start = time.perf_counter()
        try:
            result = importlib.import_module(f"benchmarks.{name}").run(output_dir, quick=quick)
        except Exception:
            log.exception("%s failed", name)
            failed.append(name)
            continue
        json_path, _ = write_result(result, output_dir)
        log.info("%s done in %.0f s: %s", name, time.perf_counter() - start, json_path)
    index = write_index(output_dir, BENCHMARKS, INDEX_HEADER)
    log.info("tables gathered in %s", index)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"any of {', '.join(BENCHMARKS)} (default: all)"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats, for iterating")
    parser.add_argument(
        "--output", type=Path, help=f"results folder (default {RESULTS_DIR}, or {QUICK_DIR} with --quick)"
    )
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.names) - set(BENCHMARKS)):
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    apply_defaults()
    setup_logging()
    output_dir = args.output or (QUICK_DIR if args.quick else RESULTS_DIR)
    output_dir.mkdir(parents=True, exist_ok=True)
    failed = run_benchmarks(args.names or BENCHMARKS, output_dir, args.quick)
    if failed:
        log.error("failed: %s", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
