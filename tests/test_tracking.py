import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.entities import Metric
from mlflow.utils.mlflow_tags import (
    MLFLOW_GIT_COMMIT,
    MLFLOW_PARENT_RUN_ID,
    MLFLOW_PROJECT_ENTRY_POINT,
    MLFLOW_SOURCE_NAME,
    MLFLOW_SOURCE_TYPE,
)

from vidtx.config import PipelineConfig, load_config
from vidtx.manifest import load_manifest
from vidtx.tracking.datasets import log_dataset_inputs
from vidtx.tracking.rank_zero import STEP_METRIC, RankZeroMetrics
from vidtx.tracking.run_source import without_credentials
from vidtx.tracking.runs import (
    DRIVER_TAG,
    END_REASON_TAG,
    EXPERIMENT_KIND_TAG,
    RUN_NAME_TAG,
    TrackingUnavailableError,
    connect,
    end_orphaned_runs,
    flatten,
    resolve_tracking_uri,
    start_or_resume_run,
)
from vidtx.train.progress import follow_progress, validation_line


@pytest.fixture
def tracking_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_tracking_uri_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = PipelineConfig(workdir=tmp_path)
    assert resolve_tracking_uri(config) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    config.tracking.tracking_uri = "http://mlflow:5000"
    assert resolve_tracking_uri(config) == "http://mlflow:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////elsewhere.db")
    assert resolve_tracking_uri(config) == "sqlite:////elsewhere.db"


def test_flatten_nested_config() -> None:
    flat = flatten({"train": {"optimizer": {"lr": 0.1}, "zero_stage": 2}, "name": "x", "empty": {}})
    assert flat == {"train.optimizer.lr": "0.1", "train.zero_stage": "2", "name": "x", "empty": "{}"}


def test_same_run_name_resumes_the_same_mlflow_run(tracking_uri: str) -> None:
    config = load_config(None, ["tracking.experiment=exp-a", "train.optimizer.lr=0.2"])
    client = connect(tracking_uri)
    first = start_or_resume_run(client, config, "run-1", {"vidtx.manifest_hash": "abc"})
    client.set_terminated(first, status="FAILED")
    again = start_or_resume_run(client, config, "run-1", {"prefect.flow_run_id": "f1"})
    other = start_or_resume_run(client, config, "run-2")
    assert again == first
    assert other != first
    run = client.get_run(first)
    assert run.info.status == "RUNNING"
    assert run.data.params["train.optimizer.lr"] == "0.2"
    assert run.data.tags[RUN_NAME_TAG] == "run-1"
    assert run.data.tags["vidtx.manifest_hash"] == "abc"
    assert run.data.tags["prefect.flow_run_id"] == "f1"
    # the UI's Source and Version columns: the checkout and the command, as an MLflow Project run
    git = ["git", "rev-parse", "HEAD"]
    commit = subprocess.run(git, cwd=Path(__file__).parent, capture_output=True, text=True).stdout.strip()
    assert run.data.tags.get(MLFLOW_GIT_COMMIT) == (commit or None)
    assert run.data.tags[MLFLOW_SOURCE_TYPE] == "PROJECT"
    assert run.data.tags[MLFLOW_SOURCE_NAME]  # the checkout's remote, else its folder
    assert run.data.tags[MLFLOW_PROJECT_ENTRY_POINT] == "train"
    experiment = client.get_experiment_by_name("exp-a")
    assert experiment.artifact_location == str(
        Path(tracking_uri.removeprefix("sqlite:///")).parent / "mlartifacts"
    )
    assert len(client.search_runs([experiment.experiment_id])) == 2
    config_text = Path(client.download_artifacts(first, "config.yaml")).read_text()
    assert "lr: 0.2" in config_text


def test_a_remote_is_recorded_without_its_credentials() -> None:
    assert (
        without_credentials("https://user:s3cret@github.com/org/vidtx.git")
        == "https://github.com/org/vidtx.git"
    )
    assert (
        without_credentials("https://ghp_token@github.com/org/vidtx.git")
        == "https://github.com/org/vidtx.git"
    )
    assert without_credentials("https://github.com/org/vidtx.git") == "https://github.com/org/vidtx.git"
    assert without_credentials("git@github.com:org/vidtx.git") == "git@github.com:org/vidtx.git"


def test_experiments_are_marked_as_model_training_so_the_ui_opens_on_their_runs(tracking_uri: str) -> None:
    """MLflow 3's UI opens an experiment without `mlflow.experimentKind` in GenAI mode (an empty Traces page)."""
    client = connect(tracking_uri)
    start_or_resume_run(client, load_config(None, ["tracking.experiment=new"]), "run-1")
    assert client.get_experiment_by_name("new").tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    older = client.create_experiment("made-before-the-mark")  # e.g. by an earlier vidtx
    start_or_resume_run(client, load_config(None, ["tracking.experiment=made-before-the-mark"]), "run-1")
    assert client.get_experiment(older).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    chosen = client.create_experiment("chosen", tags={EXPERIMENT_KIND_TAG: "finetuning"})  # in the UI
    start_or_resume_run(client, load_config(None, ["tracking.experiment=chosen"]), "run-1")
    assert client.get_experiment(chosen).tags[EXPERIMENT_KIND_TAG] == "finetuning"


def test_rank_zero_metrics_do_not_log_a_step_twice_nor_end_the_run(tracking_uri: str) -> None:
    """Nor write its status: a sweep's driver ends a stopped trial's run KILLED while the trial's
    workers shut down, and their close came after it (the run was RUNNING again)."""
    client = connect(tracking_uri)
    run_id = start_or_resume_run(client, PipelineConfig(), "r")
    environment = os.environ.get("MLFLOW_TRACKING_URI")
    metrics = RankZeroMetrics(0, tracking_uri, run_id)
    assert os.environ.get("MLFLOW_TRACKING_URI") == environment  # later runs of the process unaffected
    for step in (10, 20, 30):
        metrics.log({STEP_METRIC: float(step)}, step)
    metrics.close()
    assert client.get_run(run_id).info.status == "RUNNING"  # how the training ended is the driver's to say
    resumed = RankZeroMetrics(0, tracking_uri, run_id)  # restarted from a checkpoint at step 20
    for step in (30, 40):
        resumed.log({STEP_METRIC: -1.0 * step}, step)
    client.set_terminated(run_id, "KILLED")  # by the driver, before the workers shut down
    resumed.log({"val/loss": 1.0}, 40)
    resumed.close()
    assert client.get_run(run_id).info.status == "KILLED"
    history = {point.step: point.value for point in client.get_metric_history(run_id, STEP_METRIC)}
    assert history == {10: 10.0, 20: 20.0, 30: 30.0, 40: -40.0}
    assert RankZeroMetrics(1, tracking_uri, run_id).enabled is False


def test_progress_reports_a_validation_logged_after_its_step_s_loss(
    tracking_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A step's validation comes after its loss: a poll between the two must not lose it (the last
    step's validation line was missing from a pipeline's console)."""
    client = connect(tracking_uri)
    run_id = start_or_resume_run(client, PipelineConfig(), "progress")
    client.log_metric(run_id, STEP_METRIC, 1.0, step=6)
    calls: list[tuple] = []
    with (
        caplog.at_level(logging.INFO, logger="vidtx.train.progress"),
        follow_progress(client, run_id, 6, lambda *call: calls.append(call), interval=0.05),
    ):
        deadline = time.monotonic() + 30
        while not calls and time.monotonic() < deadline:  # a poll saw step 6, no validation yet
            time.sleep(0.01)
        assert calls[0][3] is None
        validation = [
            Metric("val/top1", 0.5, 0, 6),
            Metric("val/top5", 1.0, 0, 6),
            Metric("val/loss", 0.25, 0, 6),
        ]
        client.log_batch(run_id, metrics=validation)
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "step 6: validation top-1 0.500, top-5 1.000, loss 0.250" in caplog.text
    assert calls[-1][3].startswith("step 6: validation top-1 0.500")


def test_progress_names_each_objective_s_validation_figures() -> None:
    """A multi-label run's line gives its mAP, a pretraining's its loss alone."""
    multi_label = {"val/mean_ap": 0.625, "val/loss": 0.5}
    assert validation_line(4, multi_label) == "step 4: validation mAP 0.625, loss 0.500"
    assert validation_line(4, {"val/loss": 0.0421}) == "step 4: validation loss 0.042"


def test_unreachable_tracking_store_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    with pytest.raises(TrackingUnavailableError, match=r"http://127.0.0.1:9 is unavailable"):
        connect("http://127.0.0.1:9")


START_A_RUN_AND_EXIT = """
import sys
from vidtx.config import load_config
from vidtx.tracking.runs import connect, start_or_resume_run
config = load_config(None, ["tracking.experiment=exp-orphans"])
start_or_resume_run(connect(sys.argv[1]), config, "killed-run")
"""


def test_a_run_whose_process_is_gone_is_ended_killed_at_the_next_start(tracking_uri: str) -> None:
    """A training killed outright (SIGKILL, a lost machine) leaves its run RUNNING: the next start on
    the host ends it KILLED, and leaves alone the runs of live processes and of other hosts."""
    subprocess.run([sys.executable, "-c", START_A_RUN_AND_EXIT, tracking_uri], check=True, timeout=120)
    config = load_config(None, ["tracking.experiment=exp-orphans"])
    client = connect(tracking_uri)
    live = start_or_resume_run(client, config, "live-run")  # driven by this (live) process
    elsewhere = start_or_resume_run(client, config, "other-host-run")
    client.set_tag(elsewhere, DRIVER_TAG, "another-host 1 1.00")
    pid_reused = start_or_resume_run(client, config, "pid-reused-run")  # this pid, another start time
    client.set_tag(pid_reused, DRIVER_TAG, f"{socket.gethostname()} {os.getpid()} 1.00")
    # a sweep's trials whose processes are gone: the one whose sweep lives is its sweep's to end
    dead = f"{socket.gethostname()} {os.getpid()} 1.00"
    for trial, parent in (("trial-of-a-live-sweep", live), ("trial-of-a-dead-sweep", pid_reused)):
        trial_id = start_or_resume_run(client, config, trial, {MLFLOW_PARENT_RUN_ID: parent})
        client.set_tag(trial_id, DRIVER_TAG, dead)

    ended = end_orphaned_runs(client, "exp-orphans")

    runs = {
        run.info.run_name: run
        for run in client.search_runs([client.get_experiment_by_name("exp-orphans").experiment_id])
    }
    gone = ("killed-run", "pid-reused-run", "trial-of-a-dead-sweep")
    assert sorted(ended) == sorted(runs[name].info.run_id for name in gone)
    assert runs["trial-of-a-live-sweep"].info.status == "RUNNING"
    assert runs["killed-run"].info.status == "KILLED"
    assert "is gone" in runs["killed-run"].data.tags[END_REASON_TAG]
    assert runs["pid-reused-run"].info.status == "KILLED"
    assert client.get_run(live).info.status == client.get_run(elsewhere).info.status == "RUNNING"
    assert end_orphaned_runs(client, "exp-orphans") == []


def test_a_run_records_its_splits_as_mlflow_dataset_inputs_once(
    tracking_uri: str, synthetic_shards: tuple[Path, Path]
) -> None:
    _, shards = synthetic_shards
    client = connect(tracking_uri)
    run_id = start_or_resume_run(client, load_config(None, []), "with-data")
    splits = {"training": load_manifest(shards, "train"), "validation": load_manifest(shards, "val")}
    for _ in range(2):  # a resumed run logs them again: nothing is added
        log_dataset_inputs(
            client, run_id, [(context, shards, manifest) for context, manifest in splits.items()]
        )
    inputs = client.get_run(run_id).inputs.dataset_inputs
    assert sorted((i.tags[0].key, i.tags[0].value) for i in inputs) == [
        ("mlflow.data.context", "training"),
        ("mlflow.data.context", "validation"),
    ]
    for given in inputs:
        manifest = splits[given.tags[0].value]
        assert given.dataset.name == f"{shards.name}/{manifest.split}"
        assert given.dataset.digest == manifest.content_hash[:16]  # the same data, the same digest
        assert json.loads(given.dataset.source) == {"uri": str(shards / f"{manifest.split}.manifest.json")}
        assert given.dataset.source_type == "local"
