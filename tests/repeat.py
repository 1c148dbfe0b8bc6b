"""Run test modules several times each, one pytest process per run, and print a table of how they fared.

    python tests/repeat.py                      # every module with a slow test, 5 runs each
    python tests/repeat.py -n 10 tests/test_shard_ray.py tests/test_cluster.py

A module that fails one run in N is a defect to find and fix at its cause (docs: Development). Each
run is a fresh process, as in CI; the runs of a module follow one another (two at once on 2 cores
would measure the machine's load, not the module). The table: module, runs, failures, the first
line of the first failure; `--log DIR` keeps each run's output.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SLOW_MARK = re.compile(r"^pytestmark = .*pytest\.mark\.slow|@pytest\.mark\.slow", re.MULTILINE)
FAILURE = re.compile(r"^(?:FAILED|ERROR) (.+)$", re.MULTILINE)
# As `make test` runs pytest: Python may write byte-code. The venv is installed without it (pip
# --no-compile), so with PYTHONDONTWRITEBYTECODE set every process of a run (Ray workers, flow-run
# processes) compiles what it imports again: the modules took twice as long.
AS_MAKE_RUNS_IT = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


@dataclass
class Tally:
    module: str
    runs: int = 0
    failures: int = 0
    first_failure: str = ""
    seconds: list[float] = field(default_factory=list)


def slow_modules() -> list[Path]:
    """The modules with a slow test: those that start Ray, DeepSpeed, Prefect, MLflow, the S3 server
    or the stack."""
    return sorted(path for path in TESTS.glob("test_*.py") if SLOW_MARK.search(path.read_text()))


def run_once(module: Path, tally: Tally, log_dir: Path | None) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(module)],
        cwd=TESTS.parent,
        env=AS_MAKE_RUNS_IT,
        capture_output=True,
        text=True,
        check=False,
    )
    tally.seconds.append(time.monotonic() - started)
    tally.runs += 1
    if log_dir is not None:
        (log_dir / f"{module.stem}-{tally.runs}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tally.failures += 1
        if not tally.first_failure:
            failed = FAILURE.search(done.stdout)
            tail = (done.stdout + done.stderr).strip().splitlines() or ["(no output)"]
            tally.first_failure = failed.group(1) if failed else tail[-1]


def table(tallies: list[Tally]) -> str:
    rows = ["| module | runs | failures | mean s | first failure |", "|---|---|---|---|---|"]
    for t in tallies:
        mean = sum(t.seconds) / len(t.seconds) if t.seconds else 0.0
        rows.append(f"| {t.module} | {t.runs} | {t.failures} | {mean:.0f} | {t.first_failure[:160]} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", type=Path, help="test modules (default: every slow one)")
    parser.add_argument("-n", "--runs", type=int, default=5, help="runs per module (default 5)")
    parser.add_argument("--log", type=Path, help="a folder to keep each run's output in")
    args = parser.parse_args()
    modules = [path.resolve() for path in args.modules] or slow_modules()
    if args.log:
        args.log.mkdir(parents=True, exist_ok=True)
    tallies = []
    for module in modules:
        tally = Tally(module.name)
        tallies.append(tally)
        for _ in range(args.runs):
            run_once(module, tally, args.log)
            print(f"{module.name}: run {tally.runs}/{args.runs}, {tally.failures} failed", flush=True)
    print(table(tallies))
    return 1 if any(t.failures for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
