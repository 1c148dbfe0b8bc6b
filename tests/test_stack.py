"""`make stack`: PostgreSQL, the S3 server, MLflow, Prefect and a two-node Ray cluster as real processes on
this machine, with authentication on, and the demo pipeline across it as `make demo-stack` runs it.
One stack for the module, in this order: anonymous requests are refused and the env file's
credentials work, no secret reaches a log, nothing listens beyond loopback; then one pipeline run
through the Prefect API that meets the faults a team meets (the MLflow server restarted mid-training,
the Prefect worker killed mid-training and the run retried, PostgreSQL restarted), checked through the
services' own APIs; last, `stop` ends exactly what `start` started."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import boto3
import psutil
import pytest
from botocore.exceptions import ClientError
from sockets import exposed, listening_sockets, process_tree
from stack_services import (
    Services,
    Stack,
    assert_trained_once,
    basic,
    client_run,
    demo_stack,
    finished,
    running_stack,
    stack_command,
    status,
    wait_until,
)

from infra.local.processes import end_tree

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("s3-store", "s3", "mlflow", "prefect-server", "ray-head", "ray-worker", "prefect-worker")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One stack for the module (the last test stops it): its folder, env file and ports."""
    yield from running_stack(tmp_path_factory)


def test_every_service_refuses_anonymous_requests_and_takes_the_env_files_credentials(stack) -> None:
    _, env, _ = stack
    searches = f"{env['MLFLOW_TRACKING_URI']}/api/2.0/mlflow/experiments/search?max_results=1"
    assert status(searches) == 401
    assert status(searches, basic("admin:wrong")) == 401
    assert status(searches, basic(f"admin:{env['MLFLOW_TRACKING_PASSWORD']}")) == 200
    flows = f"{env['PREFECT_API_URL']}/flows/filter"
    assert status(flows, data=b"{}") == 401
    assert status(flows, basic(env["PREFECT_API_AUTH_STRING"]), b"{}") == 200
    jobs = f"{env['RAY_ADDRESS']}/api/jobs/"
    assert status(jobs) == 401
    assert status(jobs, {"Authorization": f"Bearer {env['RAY_AUTH_TOKEN']}"}) == 200
    assert status(f"{env['AWS_ENDPOINT_URL']}/vidtx") == 403  # unsigned: AccessDenied, no listing
    wrong = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="x", aws_secret_access_key="y",
                         region_name="us-east-1")  # fmt: skip
    with pytest.raises(ClientError, match="InvalidAccessKeyId"):
        wrong.list_objects_v2(Bucket="vidtx")

    # the clients, with nothing but the env file: MLflow (artifacts go through the server to the
    # bucket, so the client needs no S3 keys), Prefect's work pool and worker, both Ray nodes
    mlflow_only = {k: v for k, v in env.items() if k.startswith("MLFLOW_")}
    run_id = client_run(mlflow_only, """
import mlflow, tempfile, pathlib
with mlflow.start_run() as run:
    mlflow.log_metric("loss", 0.5)
    with tempfile.TemporaryDirectory() as d:
        pathlib.Path(d, "note.txt").write_text("hello")
        mlflow.log_artifact(str(pathlib.Path(d, "note.txt")))
print(run.info.run_id)
""")  # fmt: skip
    signed = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")  # fmt: skip
    keys = [item["Key"] for item in signed.list_objects_v2(Bucket="mlflow-artifacts").get("Contents", [])]
    assert any(key.endswith(f"{run_id}/artifacts/note.txt") for key in keys), keys
    workers = client_run(env, """
from prefect.client.orchestration import get_client
with get_client(sync_client=True) as client:
    print(client.read_work_pool("vidtx-process").name, len(client.read_workers_for_work_pool("vidtx-process")))
""")  # fmt: skip
    assert workers.split()[0] == "vidtx-process"
    nodes = client_run(env, """
import os
from ray.util.state import list_nodes
print(sum(node.state == "ALIVE" for node in list_nodes(address=os.environ["RAY_ADDRESS"])))
""")  # fmt: skip
    assert nodes == "2"


def test_the_env_file_is_private_and_no_secret_reaches_a_log(stack) -> None:
    folder, _, _ = stack
    for private in ("stack.env", "secrets.json", "mlflow-auth.ini", "seaweedfs/s3.json"):
        assert stat.S_IMODE((folder / private).stat().st_mode) == 0o600
    settings = json.loads((folder / "secrets.json").read_text())
    values = [v for v in settings.values() if isinstance(v, str)] + list(settings["s3"].values())
    for log in (folder / "logs").glob("*.log"):
        text = log.read_text(errors="replace")
        assert [value[:4] for value in values if value in text] == [], log.name


def test_every_service_ray_included_listens_on_loopback_only(stack) -> None:
    """Issue 43 case 3: the Ray nodes listened on the machine's address or every interface (GCS,
    raylets, object managers, agents, the Ray Client server), four metrics endpoints answering anyone."""
    folder, _, _ = stack
    pids = {int(pidfile.read_text()) for pidfile in (folder / "pids").glob("*.pid")}
    postmaster = int((folder / "postgres" / "postmaster.pid").read_text().split()[0])
    tree = set().union(*(process_tree(pid) for pid in pids | {postmaster}))
    listening = listening_sockets(tree)
    names = {name for owners in listening.values() for name in owners}
    # postgres, s3, mlflow, prefect (the worker listens on nothing) and both Ray nodes were seen
    assert {"postgres", "gcs_server", "raylet"} <= names, names
    assert sum("raylet" in owners for owners in listening.values()) >= 4  # 2 nodes: node and object managers
    assert exposed(listening) == {}


# --- the pipeline across the stack, and the faults it meets -------------------------------------


@pytest.fixture(scope="module")
def pipeline_run(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """video-pipeline/stack run through the Prefect API, as `make demo-stack` runs it, meeting two
    faults mid-training: the MLflow server restarted once the training has logged its first steps, then,
    once a checkpoint is in the bucket, the Prefect worker killed with its flow-run process (a lost
    machine), started again, and the crashed run retried as the UI's Retry does. The flow run's id and
    the training run's name."""
    folder, env, ports = stack
    services = Services(env)
    flow_run_id = demo_stack(folder, tmp_path_factory.mktemp("demo"))
    run_name = f"stack-demo-{flow_run_id}"
    run = wait_until("the training logs a step", lambda: (r := services.training_run(run_name)) and services.steps(r["info"]["run_id"]), 900)  # fmt: skip
    assert run
    restarted = stack_command(folder, "restart mlflow", ports)
    assert restarted.returncode == 0, restarted.stderr
    wait_until("a checkpoint in the bucket", lambda: any("checkpoint" in k for k in services.keys("vidtx", f"ray/{run_name}/")), 900)  # fmt: skip
    assert services.flow_run_state(flow_run_id) == "RUNNING"  # killed mid-training, not after it
    (worker,) = (folder / "pids").glob("*-prefect-worker.pid")
    end_tree(int(worker.read_text()), kill=True)  # the worker and its flow-run process: a lost machine
    restarted = stack_command(folder, "restart prefect-worker", ports)
    assert restarted.returncode == 0, restarted.stderr
    assert services.flow_run_state(flow_run_id) == "CRASHED"
    # Retry, as the UI's button does: the same flow run, so the same training run name
    services.prefect(f"/flow_runs/{flow_run_id}/set_state", {"state": {"type": "SCHEDULED", "name": "AwaitingRetry"}, "force": True})  # fmt: skip
    assert finished(services, flow_run_id) == "COMPLETED"
    return flow_run_id, run_name


def test_the_pipeline_runs_across_the_stack_through_an_mlflow_restart_and_a_killed_worker(
    stack: Stack, pipeline_run: tuple[str, str]
) -> None:
    """Once trained, every step logged once into the one MLflow run, FINISHED, though its server was
    restarted and the worker that ran the flow was lost mid-training; the retry did not train beside
    the Ray Job that kept training on the cluster."""
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
    # the training ran on both Ray nodes as a Ray Job, which the retry followed while it trained (or,
    # had it finished, whose result it took: tests/test_cluster.py checks that no second job starts)
    jobs = [
        job for job in services.ray_jobs() if (job.get("metadata") or {}).get("vidtx.run_name") == run_name
    ]
    assert jobs
    assert {job["status"] for job in jobs} == {"SUCCEEDED"}, jobs


def test_no_secret_reaches_mlflow_prefect_ray_the_manifests_or_a_log(
    stack: Stack, pipeline_run: tuple[str, str]
) -> None:
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


def test_the_services_reconnect_after_postgresql_restarts(
    stack: Stack, pipeline_run: tuple[str, str]
) -> None:
    folder, env, ports = stack
    restarted = stack_command(folder, "restart postgres", ports)
    assert restarted.returncode == 0, restarted.stderr
    searches = f"{env['MLFLOW_TRACKING_URI']}/api/2.0/mlflow/experiments/search?max_results=5"
    mlflow_login = basic(f"admin:{env['MLFLOW_TRACKING_PASSWORD']}")
    wait_until("MLflow answers from PostgreSQL", lambda: status(searches, mlflow_login) == 200, 60)
    flow_run = f"{env['PREFECT_API_URL']}/flow_runs/{pipeline_run[0]}"
    wait_until("Prefect answers from PostgreSQL", lambda: status(flow_run, basic(env["PREFECT_API_AUTH_STRING"])) == 200, 60)  # fmt: skip


def test_stop_ends_exactly_what_start_started_and_a_restart_finds_every_object(stack) -> None:
    """`stop` ends what `start` started and keeps the data; started again, the stack serves the runs'
    artifacts and the buckets' objects it had (moto lost them: issue 69), and stops cleanly again."""
    folder, env, ports = stack
    roots = {
        pidfile.name.split("-", 1)[1].removesuffix(".pid"): int(pidfile.read_text())
        for pidfile in (folder / "pids").glob("*.pid")
    }
    assert set(roots) == set(SERVICES)
    tree = set().union(*(process_tree(pid) for pid in roots.values()))
    signed = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")  # fmt: skip
    before = {bucket: objects(signed, bucket) for bucket in ("vidtx", "mlflow-artifacts")}
    assert before["vidtx"], "the pipeline's shards and checkpoints"
    assert before["mlflow-artifacts"], "its runs' artifacts and models"
    again = stack_command(folder, "start", ports)
    assert again.returncode != 0
    assert "is running" in again.stderr
    stopped = stack_command(folder, "stop", ports)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip().startswith("stopped: prefect-worker, ray-worker, ray-head")
    left = [
        pid for pid in tree if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]
    assert left == []
    assert not (folder / "postgres" / "postmaster.pid").exists()
    assert (folder / "postgres" / "PG_VERSION").exists()  # the databases stay
    assert list((folder / "pids").glob("*.pid")) == []

    started = stack_command(folder, "start", ports)
    assert started.returncode == 0, started.stderr
    assert {bucket: objects(signed, bucket) for bucket in before} == before  # every key, size and ETag
    note = client_run({k: v for k, v in env.items() if k.startswith("MLFLOW_")}, """
import mlflow
run = mlflow.search_runs(search_all_experiments=True, filter_string="attributes.status = 'FINISHED'",
                         output_format="list", order_by=["attributes.start_time ASC"])[0]
print(open(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="note.txt")).read())
""")  # fmt: skip
    assert note == "hello"  # the first test's artifact, through the restarted MLflow server
    assert stack_command(folder, "stop", ports).returncode == 0


def objects(client, bucket: str) -> dict[str, tuple[int, str]]:
    """Every object of `bucket`: key -> (size, ETag)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {item["Key"]: (item["Size"], item["ETag"]) for page in pages for item in page.get("Contents", [])}
