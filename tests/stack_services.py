"""`make stack` for tests: a stack on free ports in a folder of the test's own, and plain HTTP calls
to its services.

Imported as `from stack_services import ...` (tests/ is on sys.path under pytest, see media.py).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.local.demo_stack import read_env_file
from infra.local.s3_server import free_port

ROOT = Path(__file__).resolve().parent.parent


def stack_command(folder: Path, action: str, ports: dict[str, int]) -> subprocess.CompletedProcess[str]:
    """`python -m infra.local.stack ACTION` as `make stack` runs it, without the test session's
    service variables (the stack's clients take theirs from its env file)."""
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MLFLOW_", "PREFECT_", "RAY_"))
    }
    environment |= {"VIDTX_STACK_DIR": str(folder)} | {
        f"STACK_{k.upper()}_PORT": str(v) for k, v in ports.items()
    }
    command = [sys.executable, "-m", "infra.local.stack", *action.split()]  # "restart mlflow"
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)


def running_stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, dict[str, str], dict[str, int]]]:
    """A stack on free ports in a temporary folder, for a module's fixture: its folder, env file and
    ports; purged at the end (PostgreSQL's folder too, which lies outside tmp as root)."""
    folder = tmp_path_factory.mktemp("stack")
    ports = {
        name: free_port() for name in ("postgres", "s3", "mlflow", "prefect", "ray_gcs", "ray_dashboard")
    }
    started = stack_command(folder, "start", ports)
    try:
        assert started.returncode == 0, started.stderr + "".join(
            f"\n--- {log.name}\n{log.read_text()[-2000:]}" for log in (folder / "logs").glob("*.log")
        )
        yield folder, read_env_file(folder / "stack.env"), ports
    finally:
        stack_command(folder, "purge", ports)  # PostgreSQL's folder too (outside tmp as root)


def status(url: str, headers: dict[str, str] | None = None, data: bytes | None = None) -> int:
    request = urllib.request.Request(url, data, {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def basic(user_and_password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(user_and_password.encode()).decode()}


def client_run(env: dict[str, str], code: str) -> str:
    """`code` in a fresh process whose only service variables are the env file's: its stdout."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MLFLOW_", "PREFECT_", "RAY_"))}
    done = subprocess.run(
        [sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]  # MLflow prints a "View run" line first
