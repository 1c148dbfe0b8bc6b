"""Helpers of the tests that train through Ray Train: a run's config in a test's folder, and a logged
metric's history. Imported as `from training_runs import ...` (tests/ is on sys.path under pytest)."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from mlflow import MlflowClient

from vidtx.config import PipelineConfig
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
