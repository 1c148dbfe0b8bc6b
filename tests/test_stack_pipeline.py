"""The demo pipeline across `make stack`, as `make demo-stack` runs it, checked through the services'
own APIs; and the faults a team meets on it: the MLflow server restarted mid-training, PostgreSQL
restarted, the Prefect worker killed mid-training and started again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
from stack_services import ROOT, basic, running_stack, stack_command, status

from infra.local.processes import end_tree

pytestmark = pytest.mark.slow
MAX_STEPS, LOG_EVERY = 60, 10
SMALL = [
    *("synth.videos_per_class.train=8", "synth.videos_per_class.val=4", "synth.videos_per_class.test=4"),
    *(f"train.max_steps={MAX_STEPS}", f"train.log_every={LOG_EVERY}", "train.checkpoint_every=20"),
    *("train.val_every=30", "shard.max_samples_per_shard=16"),
]
Stack = tuple[Path, dict[str, str], dict[str, int]]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from running_stack(tmp_path_factory)


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


def wait_until(what: str, check: Callable[[], object], timeout: float, every: float = 3.0) -> object:
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


@pytest.fixture(scope="module")
def pipeline_run(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """video-pipeline/stack run through the Prefect API; the MLflow server restarted once the training
    has logged its first steps. The flow run's id and the training run's name."""
    folder, env, ports = stack
    services = Services(env)
    flow_run_id = demo_stack(folder, tmp_path_factory.mktemp("demo"))
    run_name = f"stack-demo-{flow_run_id}"
    run = wait_until("the training logs a step", lambda: (r := services.training_run(run_name)) and services.steps(r["info"]["run_id"]), 900)  # fmt: skip
    assert run
    restarted = stack_command(folder, "restart mlflow", ports)
    assert restarted.returncode == 0, restarted.stderr
    assert finished(services, flow_run_id) == "COMPLETED"
    return flow_run_id, run_name


def test_the_pipeline_runs_across_the_stack_and_survives_an_mlflow_restart(
    stack: Stack, pipeline_run
) -> None:
    folder, env, _ = stack
    services = Services(env)
    _flow_run_id, run_name = pipeline_run
    run = assert_trained_once(services, run_name)
    assert run["data"]["tags"]  # the lineage tags of the flow run
    # the shards and checkpoints are in the bucket, the model's artifacts behind the MLflow server
    shards = services.keys("vidtx", "shards/synthetic/")
    assert any(key.endswith(".tar") for key in shards)
    assert any(key.endswith("manifest.json") for key in shards)
    assert any("checkpoint" in key for key in services.keys("vidtx", f"ray/{run_name}/"))
    champion = services.mlflow("registered-models/alias", name="vidtx-xvit-stack", alias="champion")
    assert champion["model_version"]["run_id"] == run["info"]["run_id"]
    assert any(key.endswith("MLmodel") for key in services.keys("mlflow-artifacts"))
    # no node read a shard from a local path: the nodes' temporary folder (both share the head's) has none
    assert list((folder / "ray").rglob("*.tar")) == []
    # the training ran on both Ray nodes, as one Ray Job
    jobs = [
        job for job in services.ray_jobs() if (job.get("metadata") or {}).get("vidtx.run_name") == run_name
    ]
    assert [job["status"] for job in jobs] == ["SUCCEEDED"]


def test_no_secret_reaches_mlflow_prefect_ray_the_manifests_or_a_log(stack: Stack, pipeline_run) -> None:
    folder, env, _ = stack
    services = Services(env)
    flow_run_id, run_name = pipeline_run
    settings = json.loads((folder / "secrets.json").read_text())
    secrets = [v for v in settings.values() if isinstance(v, str)] + list(settings["s3"].values())
    run = services.training_run(run_name)
    seen = {
        "MLflow params and tags": json.dumps(run["data"]),
        "Prefect flow runs": json.dumps(services.prefect("/flow_runs/filter", {})),
        "Prefect artifacts": json.dumps(services.prefect("/artifacts/filter", {})),
        "Ray jobs": json.dumps(services.ray_jobs()),
        **{key: services.s3.get_object(Bucket="vidtx", Key=key)["Body"].read().decode()
           for key in services.keys("vidtx", "shards/") if key.endswith(".json")},
        **{str(log): log.read_text(errors="replace")
           for log in [*(folder / "logs").glob("*.log"), *(folder / "ray").rglob("*.log"), *(folder / "ray").rglob("*.out"),
                       *(folder / "ray").rglob("*.err")] if log.is_file()},
    }  # fmt: skip
    assert len(seen) > 10
    assert flow_run_id in seen["Prefect flow runs"]
    assert {where for where, text in seen.items() for secret in secrets if secret in text} == set()


def test_the_services_reconnect_after_postgresql_restarts(stack: Stack, pipeline_run) -> None:
    folder, env, ports = stack
    restarted = stack_command(folder, "restart postgres", ports)
    assert restarted.returncode == 0, restarted.stderr
    searches = f"{env['MLFLOW_TRACKING_URI']}/api/2.0/mlflow/experiments/search?max_results=5"
    mlflow_login = basic(f"admin:{env['MLFLOW_TRACKING_PASSWORD']}")
    wait_until("MLflow answers from PostgreSQL", lambda: status(searches, mlflow_login) == 200, 60, every=1)
    flow_run = f"{env['PREFECT_API_URL']}/flow_runs/{pipeline_run[0]}"
    wait_until("Prefect answers from PostgreSQL", lambda: status(flow_run, basic(env["PREFECT_API_AUTH_STRING"])) == 200, 60, every=1)  # fmt: skip


def test_a_killed_worker_leaves_its_run_crashed_and_the_retry_finishes_the_training(
    stack: Stack, pipeline_run, tmp_path: Path
) -> None:
    folder, env, ports = stack
    services = Services(env)
    flow_run_id = demo_stack(folder, tmp_path, "name=stack-drill")
    run_name = f"stack-drill-{flow_run_id}"
    wait_until("a checkpoint in the bucket", lambda: any("checkpoint" in k for k in services.keys("vidtx", f"ray/{run_name}/")), 900)  # fmt: skip
    (worker,) = (folder / "pids").glob("*-prefect-worker.pid")
    end_tree(int(worker.read_text()), kill=True)  # the worker and its flow-run process: a lost machine
    restarted = stack_command(folder, "restart prefect-worker", ports)
    assert restarted.returncode == 0, restarted.stderr
    assert services.flow_run_state(flow_run_id) == "CRASHED"
    # Retry, as the UI's button does: the same flow run, so the same training run name
    services.prefect(f"/flow_runs/{flow_run_id}/set_state", {"state": {"type": "SCHEDULED", "name": "AwaitingRetry"}, "force": True})  # fmt: skip
    assert finished(services, flow_run_id) == "COMPLETED"
    assert_trained_once(services, run_name)
    jobs = [
        job for job in services.ray_jobs() if (job.get("metadata") or {}).get("vidtx.run_name") == run_name
    ]
    assert jobs
    assert {job["status"] for job in jobs} == {"SUCCEEDED"}, jobs
