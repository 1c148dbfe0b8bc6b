"""`make stack` for tests: a stack on free ports in a folder of the test's own, plain HTTP calls to
its services, and `make demo-stack` run on it.

Imported as `from stack_services import ...` (tests/ is on sys.path under pytest, see media.py).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest

from infra.local.demo_stack import read_env_file
from infra.local.ports import free_port

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


# --- the pipeline across the stack, checked through its services' APIs ---------------------------

MAX_STEPS, LOG_EVERY = 40, 10
SMALL = [
    *("synth.videos_per_class.train=8", "synth.videos_per_class.val=4", "synth.videos_per_class.test=4"),
    *(f"train.max_steps={MAX_STEPS}", f"train.log_every={LOG_EVERY}", "train.checkpoint_every=20"),
    *("train.val_every=30", "shard.max_samples_per_shard=16"),
]
Stack = tuple[Path, dict[str, str], dict[str, int]]  # its folder, env file and ports


class Services:
    """The stack's services over their HTTP APIs, with the env file's credentials."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                               aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")  # fmt: skip

    def _call(self, url: str, headers: dict[str, str], body: dict | None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data, {"Content-Type": "application/json", **headers})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"{}")

    def prefect(self, path: str, body: dict | None = None) -> dict:
        return self._call(
            self.env["PREFECT_API_URL"] + path, basic(self.env["PREFECT_API_AUTH_STRING"]), body
        )

    def mlflow(self, path: str, body: dict | None = None, **query: str) -> dict:
        url = f"{self.env['MLFLOW_TRACKING_URI']}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query)}"
        return self._call(url, basic(f"admin:{self.env['MLFLOW_TRACKING_PASSWORD']}"), body)

    def ray_jobs(self) -> list[dict]:
        return self._call(f"{self.env['RAY_ADDRESS']}/api/jobs/", {"Authorization": f"Bearer {self.env['RAY_AUTH_TOKEN']}"}, None)  # type: ignore[return-value]  # fmt: skip

    def flow_run_state(self, flow_run_id: str) -> str:
        return self.prefect(f"/flow_runs/{flow_run_id}")["state"]["type"]

    def training_run(self, run_name: str) -> dict | None:
        (experiment,) = [self.mlflow("experiments/get-by-name", experiment_name="vidtx-stack")["experiment"]]
        body = {
            "experiment_ids": [experiment["experiment_id"]],
            "filter": f"attributes.run_name = '{run_name}'",
        }
        runs = self.mlflow("runs/search", body).get("runs", [])
        assert len(runs) <= 1, f"{len(runs)} MLflow runs named {run_name}"
        return runs[0] if runs else None

    def steps(self, run_id: str, metric: str = "train/loss") -> list[int]:
        history = self.mlflow("metrics/get-history", run_id=run_id, metric_key=metric).get("metrics", [])
        return sorted(int(point["step"]) for point in history)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


def wait_until(what: str, check: Callable[[], object], timeout: float, every: float = 1.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if found := check():
                return found
        except OSError:  # a service restarting
            pass
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def demo_stack(folder: Path, tmp: Path, *overrides: str) -> str:
    """`make demo-stack` (small) with nothing but the stack folder; returns the flow run's id."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MLFLOW_", "PREFECT_", "RAY_"))}
    command = [sys.executable, "-m", "infra.local.demo_stack", "--no-wait", "--set", f"synth.output={tmp / 'sources'}",
               "--set", f"workdir={tmp / 'work'}", *(f"--set={o}" for o in [*SMALL, *overrides])]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=clean | {"VIDTX_STACK_DIR": str(folder)}, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (flow_run_id,) = re.findall(r"^([0-9a-f-]{36})$", done.stdout, re.MULTILINE)
    return flow_run_id


def finished(services: Services, flow_run_id: str, timeout: float = 1500) -> str:
    final = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
    return wait_until(
        "the flow run ends", lambda: (s := services.flow_run_state(flow_run_id)) in final and s, timeout
    )


def assert_trained_once(services: Services, run_name: str) -> dict:
    """One MLflow run of that name, FINISHED, with every logged step exactly once."""
    run = services.training_run(run_name)
    assert run is not None
    assert run["info"]["status"] == "FINISHED", run
    assert services.steps(run["info"]["run_id"]) == list(range(LOG_EVERY, MAX_STEPS + 1, LOG_EVERY))
    return run
