"""Figures over several seeds: the mean, spread and range of each variant's accuracy, and mean learning
curves with the worst-to-best seed band. A run is a dict with a "label" and a "curve" (a list of
{"step", "val_top1", "val_direction", ...} points); the runs of one variant share its label."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.results import RESULTS_DIR, BenchmarkResult, write_index, write_result
from benchmarks.run import BENCHMARKS, INDEX_HEADER
from vidtx.env import apply_defaults
from vidtx.log import setup_logging


@dataclass(frozen=True)
class Spread:
    """Mean, sample standard deviation and range of one figure over the seeds."""

    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    def __str__(self) -> str:
        if len(self.values) == 1:
            return f"{self.mean:.1%}"
        return f"{self.mean:.1%} ± {self.std:.1%} ({min(self.values):.0%}-{max(self.values):.0%})"


def by_label(results: list[dict]) -> dict[str, list[dict]]:
    """The runs of each variant (one per seed), in the order they were listed."""
    grouped: dict[str, list[dict]] = {}
    for result in results:
        grouped.setdefault(result["label"], []).append(result)
    return grouped


def final(runs: list[dict], key: str) -> Spread:
    return Spread(tuple(run["curve"][-1][key] for run in runs))


@dataclass(frozen=True)
class PairedDifference:
    """Variant a minus variant b in one figure, seed by seed (the same seed gives both the same
    batches, crops and, where the shapes agree, initial weights), with a 95% Student-t interval of
    the mean difference."""

    differences: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.differences)

    @property
    def interval(self) -> tuple[float, float]:
        from scipy.special import stdtrit  # Student's t quantile (scipy.stats' t.ppf, far less to import)

        count = len(self.differences)
        if count < 2:
            return (-math.inf, math.inf)
        half = stdtrit(count - 1, 0.975) * statistics.stdev(self.differences) / math.sqrt(count)
        return (self.mean - half, self.mean + half)

    def verdict(self, margin: float) -> str:
        """What the interval says: "differ" if it excludes 0, "tie" if it lies within +-`margin`, else
        "unsettled"."""
        low, high = self.interval
        if low > 0 or high < 0:
            return "differ"
        return "tie" if -margin <= low and high <= margin else "unsettled"

    def __str__(self) -> str:
        low, high = self.interval
        return f"{self.mean:+.1%} (95% interval {low:+.1%} to {high:+.1%}, {len(self.differences)} seeds)"


def paired(a: list[dict], b: list[dict], key: str) -> PairedDifference:
    """The per-seed difference of the final `key` between the runs of two variants (seeds in both)."""
    b_by_seed = {run["seed"]: run["curve"][-1][key] for run in b}
    return PairedDifference(
        tuple(run["curve"][-1][key] - b_by_seed[run["seed"]] for run in a if run["seed"] in b_by_seed)
    )


def plot_curves(results: list[dict], path: Path) -> None:
    """Mean learning curves over the seeds, with the range between the worst and best seed shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top1_axis, direction_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, runs in by_label(results).items():
        steps = [point["step"] for point in runs[0]["curve"]]
        for axis, key in ((top1_axis, "val_top1"), (direction_axis, "val_direction")):
            per_seed = list(zip(*([point[key] for point in run["curve"]] for run in runs), strict=True))
            line = axis.plot(steps, [statistics.fmean(v) for v in per_seed], marker=".", label=label)[0]
            if len(runs) > 1:
                lows, highs = [min(v) for v in per_seed], [max(v) for v in per_seed]
                axis.fill_between(steps, lows, highs, color=line.get_color(), alpha=0.15)
    for axis, title in (
        (top1_axis, "validation top-1"),
        (direction_axis, "direction accuracy (clip vs reversed)"),
    ):
        axis.set(title=title, xlabel="training step", ylim=(0, 1.02))
        axis.grid(alpha=0.3)
    direction_axis.axhline(0.5, color="grey", linestyle="--", linewidth=1)
    top1_axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def seeds_parser(prog: str, description: str | None, default: int) -> argparse.ArgumentParser:
    """The command line of a benchmark run over seeds: `--seeds N` (seeds 0..N-1) and `--output`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--seeds", type=int, default=default, help=f"runs per variant, seeds 0..N-1 (default {default})"
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR)
    return parser


def run_and_write(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    run: Callable[[argparse.Namespace], BenchmarkResult],
) -> None:
    """Parse `argv`, run the benchmark with the parsed arguments, write its result and the index."""
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    apply_defaults()
    setup_logging()
    write_result(run(args), args.output)
    write_index(args.output, BENCHMARKS, INDEX_HEADER)
