"""`make stack`: PostgreSQL, the S3 server, MLflow, Prefect and a two-node Ray cluster as real processes on
this machine, with authentication on: anonymous requests are refused, the env file's credentials work,
no secret reaches a log, and `stop` ends exactly what `start` started."""

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
from stack_services import basic, client_run, running_stack, stack_command, status

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("s3", "mlflow", "prefect-server", "ray-head", "ray-worker", "prefect-worker")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str], dict[str, int]]]:
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
    assert status(f"{env['AWS_ENDPOINT_URL']}/vidtx") >= 400  # unsigned (moto answers 500, no listing)
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
    for private in ("stack.env", "secrets.json", "mlflow-auth.ini"):
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


def test_stop_ends_exactly_what_start_started_and_keeps_the_data(stack) -> None:
    folder, _, ports = stack
    roots = {
        pidfile.name.split("-", 1)[1].removesuffix(".pid"): int(pidfile.read_text())
        for pidfile in (folder / "pids").glob("*.pid")
    }
    assert set(roots) == set(SERVICES)
    tree = set().union(*(process_tree(pid) for pid in roots.values()))
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
