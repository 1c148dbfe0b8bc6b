"""Helpers of the tests that train through Ray Train: a run's config in a test's folder, and a logged
metric's history. Imported as `from training_runs import ...` (tests/ is on sys.path under pytest)."""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient

from vidtx.config import PipelineConfig
from vidtx.train.payload import TrainResult


def run_config(dataset: PipelineConfig, tmp_path: Path, **train: object) -> PipelineConfig:
    """`dataset`'s config training in `tmp_path` (checkpoints in its `ray/`), with `train` settings."""
    config = dataset.model_copy(deep=True)
    config.workdir = tmp_path
    config.train = config.train.model_copy(update={"storage_path": str(tmp_path / "ray"), **train})
    return config


def history(result: TrainResult, metric: str) -> dict[int, float]:
    """{step: value} of `metric` in the run's MLflow run."""
    client = MlflowClient(result.tracking_uri)
    return {point.step: point.value for point in client.get_metric_history(result.mlflow_run_id, metric)}
