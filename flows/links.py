"""Links from Prefect artifacts to the MLflow UI."""

from __future__ import annotations

from vidtx.config import PipelineConfig
from vidtx.tracking.runs import resolve_tracking_uri

DEFAULT_MLFLOW_UI = "http://127.0.0.1:5000"  # where `make ui` serves the MLflow UI


def mlflow_ui(config: PipelineConfig) -> str:
    if config.tracking.ui_url:
        return config.tracking.ui_url.rstrip("/")
    uri = resolve_tracking_uri(config)
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else DEFAULT_MLFLOW_UI


def run_link(config: PipelineConfig, experiment_id: str, run_id: str) -> str:
    return f"{mlflow_ui(config)}/#/experiments/{experiment_id}/runs/{run_id}"


def artifact_link(config: PipelineConfig, experiment_id: str, run_id: str, path: str) -> str:
    return f"{run_link(config, experiment_id, run_id)}/artifacts/{path}"


def model_version_link(config: PipelineConfig, name: str, version: str) -> str:
    return f"{mlflow_ui(config)}/#/models/{name}/versions/{version}"
