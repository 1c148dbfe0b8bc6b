"""Cancelling a run from Prefect, as the UI's Cancel button does, through `make ui`'s real server and
process worker: the run ends Cancelled all the way up, nothing of it Crashed, and its log says what
vidtx stopped. While it trains, nothing of `make ui` listens beyond loopback: its Prefect server, MLflow
UI and worker, and the flow run's process with its local Ray and Ray Train workers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from demo_config import config_file, shrunk_demo_config
from mlflow import MlflowClient
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.client.schemas.sorting import LogSort
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.states import Cancelling
from sockets import exposed, listening_sockets
from ui_stack import started_stack

pytestmark = pytest.mark.slow


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(1)


def test_cancelling_the_pipeline_while_it_trains_ends_every_run_cancelled_with_vidtx_line(
    tmp_path: Path,
) -> None:
    with started_stack(tmp_path) as stack, temporary_settings({PREFECT_API_URL: f"{stack.prefect_url}/api"}):
        config = shrunk_demo_config(
            tmp_path / "run",
            f"tracking.tracking_uri=sqlite:///{stack.env['MLFLOW_DB']}",
            "train.max_steps=100000",
        )
        parameters = {"settings": {"config": str(config_file(config, tmp_path))}}
        pipeline = run_deployment("video-pipeline/demo", parameters=parameters, timeout=0)
        tracking = MlflowClient(f"sqlite:///{stack.env['MLFLOW_DB']}")

        def training_steps_logged() -> bool:
            experiments = [e.experiment_id for e in tracking.search_experiments()]
            return bool(tracking.search_runs(experiments, "metrics.`train/loss` > 0"))

        wait_until(training_steps_logged, 600, "training logged its first steps")
        listening = listening_sockets({process.pid for process in stack.processes()})
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(pipeline.id, Cancelling())  # what the UI's Cancel button sends
            wait_until(lambda: client.read_flow_run(pipeline.id).state.is_final(), 180, "the run ended")
            runs = client.read_flow_runs()
            states = {run.name: [s.name for s in client.read_flow_run_states(run.id)] for run in runs}
            task_runs = {task_run.name: task_run.state for task_run in client.read_task_runs()}
            logs = client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[pipeline.id])), sort=LogSort.TIMESTAMP_ASC
            )
        (mlflow_run,) = tracking.search_runs([e.experiment_id for e in tracking.search_experiments()])
        leftover_ray = [p.name() for p in stack.processes() if p.name() in ("raylet", "gcs_server")]

    for port in stack.ports:  # the Prefect server's and the MLflow UI's
        assert f"tcp 127.0.0.1:{port}" in listening, listening
    assert {"gcs_server", "raylet"} <= {name for names in listening.values() for name in names}, listening
    assert not exposed(listening), f"listening beyond loopback: {exposed(listening)}"
    # no Crashed anywhere: the pipeline, its train-model subflow and the training task ended Cancelled
    assert all("Crashed" not in history for history in states.values()), states
    assert states[pipeline.name][-3:] == ["Running", "Cancelling", "Cancelled"], states[pipeline.name]
    cancelled_flows = [name for name, history in states.items() if history[-1] == "Cancelled"]
    assert len(cancelled_flows) == 2, states  # video-pipeline and train-model
    (training,) = [state for name, state in task_runs.items() if name.startswith("run_training")]
    assert training.is_cancelled()
    assert not [name for name, state in task_runs.items() if state.is_crashed()]
    stopped = (
        f"training {config.name}-{pipeline.id} stopped: Ray shut down, MLflow run {mlflow_run.info.run_id} "
        f"ended KILLED, checkpoints kept in "
    )
    # its message is vidtx's line, unless the server's clean-up of the cancelled run got there first
    assert training.message.startswith(stopped) or training.message == "The parent flow run was cancelled."
    assert mlflow_run.info.status == "KILLED"
    assert not leftover_ray
    # the pipeline's own log: vidtx's line is the last but Prefect's account of the cancel
    messages = [log.message for log in logs]
    (line,) = [m for m in messages if m.startswith(f"cancelled: {stopped}")]
    after = messages[messages.index(line) + 1 :]
    assert all(m == "Flow run was cancelled." or m.startswith("Finished in state") for m in after), after
    assert not [m for m in messages if "Crash detected" in m or "Traceback" in m]
