"""Benchmark results: what one benchmark measured, written as JSON (everything) and markdown (tables).

`benchmarks/results/<name>.json` holds the inputs, the environment (torch version, CPUs, load,
date, git commit), the raw measurements and the tables; `<name>.md` renders the tables; the
results README gathers every `<name>.md`.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO_ROOT = RESULTS_DIR.parent.parent


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]


@dataclass
class BenchmarkResult:
    """`name` is the file stem; `summary` says what was compared with what and how it was measured;
    `notes` say what the figures show and why; `figures` are PNG files beside the results."""

    name: str
    title: str
    summary: str
    inputs: dict[str, Any]
    tables: list[Table]
    raw: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    quick: bool = False


def fmt(value: float, digits: int = 3) -> str:
    """A number with `digits` significant digits, without scientific notation for everyday sizes."""
    if value == 0 or not 1e-3 <= abs(value) < 1e6:
        return f"{value:.{digits}g}"
    decimals = max(0, digits - 1 - int(f"{abs(value):e}".split("e")[1]))
    return f"{value:,.{decimals}f}"


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")


def _git_commit() -> str | None:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return result.stdout.strip()


def environment() -> dict[str, Any]:
    """Where and when the figures were measured; the load averages tell how busy the machine was."""
    cuda = torch.cuda.is_available()
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads_default": torch.get_num_threads(),
        "load_average_1_5_15_min": [round(load, 2) for load in os.getloadavg()],
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "cuda": torch.version.cuda if cuda else None,
    }


def markdown_table(table: Table) -> str:
    lines = [
        f"**{table.title}**",
        "",
        "| " + " | ".join(table.columns) + " |",
        "|" + "|".join("---" for _ in table.columns) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return "\n".join(lines)


def describe_environment(env: dict[str, Any]) -> str:
    device = f"{env['gpu']} (CUDA {env['cuda']}), " if env.get("gpu") else ""
    return (
        f"Measured {env['date'][:10]} at commit {env['git_commit']} on {device}{env['cpu']} "
        f"({env['cpus_usable']} usable cores), torch {env['torch']}; "
        f"load average {' / '.join(map(str, env['load_average_1_5_15_min']))} (1 / 5 / 15 min)."
    )


def markdown(result: BenchmarkResult, env: dict[str, Any]) -> str:
    title = result.title + (" (quick run)" if result.quick else "")
    parts = [f"## {title}", result.summary, *map(markdown_table, result.tables)]
    if result.notes:
        parts.append("\n".join(f"- {note}" for note in result.notes))
    parts += [f"![{figure}]({figure})" for figure in result.figures]
    parts.append(f"_{describe_environment(env)}_")
    return "\n\n".join(parts) + "\n"


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def write_result(result: BenchmarkResult, output_dir: Path = RESULTS_DIR) -> tuple[Path, Path]:
    """Write `<name>.json` and `<name>.md` under `output_dir`; returns both paths."""
    output_dir.mkdir(parents=True, exist_ok=True)
    env = environment()
    json_path, md_path = output_dir / f"{result.name}.json", output_dir / f"{result.name}.md"
    # Not `asdict(result)`: it would turn the raw `Samples` into bare dicts before `to_json` sees them.
    document = {**{item.name: getattr(result, item.name) for item in fields(result)}, "environment": env}
    json_path.write_text(json.dumps(document, indent=2, default=_jsonable) + "\n")
    md_path.write_text(markdown(result, env))
    return json_path, md_path


def write_index(output_dir: Path, order: Sequence[str], header: Iterable[str]) -> Path:
    """`README.md` of the results folder: `header`, then every `<name>.md` there, those named in
    `order` first."""
    found = {path.stem: path for path in output_dir.glob("*.md") if path.name != "README.md"}
    names = [name for name in order if name in found] + sorted(set(found) - set(order))
    body = [found[name].read_text().strip() for name in names]
    path = output_dir / "README.md"
    path.write_text("\n\n".join([*header, *body]) + "\n")
    return path


def read_result(name: str, output_dir: Path = RESULTS_DIR) -> dict[str, Any] | None:
    """A written result as its JSON document, or None when it was never measured."""
    path = output_dir / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None
