"""Addresses of pages in the MLflow UI, for links from Prefect artifacts and summaries."""

from __future__ import annotations

from vidtx.config import PipelineConfig
from vidtx.tracking.runs import resolve_tracking_uri

LOCAL_MLFLOW_UI = "http://127.0.0.1:5000"  # where `make ui` serves the MLflow UI


def mlflow_ui(config: PipelineConfig) -> str:
    """`tracking.ui_url`, else the tracking server when it is one, else the local UI of `make ui`."""
    if config.tracking.ui_url:
        return config.tracking.ui_url.rstrip("/")
    uri = resolve_tracking_uri(config)
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else LOCAL_MLFLOW_UI


def run_link(config: PipelineConfig, run_id: str) -> str:
    """The run's page (the UI finds its experiment)."""
    return f"{mlflow_ui(config)}/#/runs/{run_id}"


def artifact_link(config: PipelineConfig, experiment_id: str, run_id: str, path: str) -> str:
    return f"{mlflow_ui(config)}/#/experiments/{experiment_id}/runs/{run_id}/artifacts/{path}"


def model_version_link(config: PipelineConfig, name: str, version: str) -> str:
    return f"{mlflow_ui(config)}/#/models/{name}/versions/{version}"
