"""Helpers of the tests that train through Ray Train: a run's config in a test's folder, a logged
metric's history, waiting until a run has a registered checkpoint, and the samples each rank trained
on beside those an uninterrupted run would have. Imported as
`from training_runs import ...` (tests/ is on sys.path under pytest)."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow import MlflowClient

from vidtx import storage
from vidtx.config import PipelineConfig
from vidtx.data.train_loader import build_train_loader
from vidtx.locations import Location, location
from vidtx.storage import join
from vidtx.tracking.rank_zero import STEP_METRIC
from vidtx.train.payload import TrainResult


@functools.cache
def _empty_tracking_store() -> Path:
    """An MLflow SQLite store with MLflow's tables and nothing in them, made once per session."""
    folder = Path(tempfile.mkdtemp(prefix="vidtx-empty-store-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    MlflowClient(f"sqlite:///{folder / 'mlflow.db'}").search_experiments()  # creates the tables
    return folder / "mlflow.db"


def with_empty_tracking_store(workdir: Path) -> None:
    """Put an empty MLflow store where a run in `workdir` looks for its default one
    (`sqlite:///WORKDIR/mlflow.db`). A new store runs MLflow's schema migrations, about 2 s on this
    machine, which each training test would pay again; vidtx's own creation of a missing store stays
    tested by the command-line and flow tests, which start without one."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_empty_tracking_store(), workdir / "mlflow.db")


def run_config(dataset: PipelineConfig, tmp_path: Path, **train: object) -> PipelineConfig:
    """`dataset`'s config training in `tmp_path` (checkpoints in its `ray/`, an empty MLflow store),
    with `train` settings."""
    with_empty_tracking_store(tmp_path)
    config = dataset.model_copy(deep=True)
    config.workdir = tmp_path
    config.train = config.train.model_copy(update={"storage_path": str(tmp_path / "ray"), **train})
    return config


def history(result: TrainResult, metric: str) -> dict[int, float]:
    """{step: value} of `metric` in the run's MLflow run."""
    client = MlflowClient(result.tracking_uri)
    return {point.step: point.value for point in client.get_metric_history(result.mlflow_run_id, metric)}


def registered_checkpoints(run_dir: Location) -> list[int]:
    """The steps of the checkpoints Ray Train's controller has registered for the run in `run_dir`
    (its `checkpoint_manager_snapshot.json`, Ray 2.60). Workers report checkpoints asynchronously:
    only a registered one survives a kill, so the kill tests wait for one."""
    try:
        snapshot = json.loads(storage.read_text(join(run_dir, "checkpoint_manager_snapshot.json")))
    except (FileNotFoundError, json.JSONDecodeError):  # not yet written, or being replaced
        return []
    return [result["metrics"]["step"] for result in snapshot["checkpoint_results"]]


def trained_until(config: PipelineConfig, run_name: str, step: int, running: Callable[[], bool]) -> bool:
    """Wait (5 min at most, while `running()`) until the run has logged `step` and Ray has registered
    one of its checkpoints; whether it got there."""
    client = MlflowClient(f"sqlite:///{config.workdir.resolve() / 'mlflow.db'}")
    run_dir = join(location(config.train.storage_path), run_name)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and running():
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        if runs and runs[0].data.tags.get("vidtx.checkpoint") is None:  # not finished
            steps = [p.step for p in client.get_metric_history(runs[0].info.run_id, STEP_METRIC)]
            if steps and max(steps) >= step and registered_checkpoints(run_dir):
                return True
        time.sleep(0.5)
    return False


def logged_keys(folder: Path, rank: int) -> dict[int, list[str]]:
    """{step: sample keys} of a rank's `train.sample_log`; a step trained again: its later line."""
    lines = (folder / f"rank-{rank}.jsonl").read_text().splitlines()
    return {record["step"]: record["keys"] for record in map(json.loads, lines)}


def uninterrupted_keys(
    config: PipelineConfig, rank: int, steps: int, monkeypatch: pytest.MonkeyPatch
) -> dict[int, list[str]]:
    """{step: sample keys} of rank `rank`'s first `steps` batches as a loader reads them from the start."""
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(config.train.num_workers))
    loader = build_train_loader(config.data, batch_size=config.train.micro_batch_size, seed=config.train.seed)
    keys: list[list[str]] = []
    while len(keys) < steps:
        keys += [batch.keys for batch in loader]
    return dict(enumerate(keys[:steps], start=1))
