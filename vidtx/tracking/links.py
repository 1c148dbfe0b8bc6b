"""Addresses of pages in the MLflow UI, for links from Prefect artifacts and summaries.

MLflow 3.17's UI shows an experiment as a GenAI app (an Overview of traces and token costs, the
model registry hidden) unless the page is asked for the model-training view: the experiment's
`mlflow.experimentKind` tag is not consulted while the GenAI / Model training switch is shown, and
the switch starts on GenAI in a new browser profile. So every link names the view (`WORKFLOW`) and
goes through the experiment's route: `#/runs/<id>` redirects and drops the parameter. The UI's root
opens the GenAI pages too (traces, costs, an Assistant panel): nothing vidtx prints sends a person
there, but to an experiment, run or model version (`make ui` names the experiments' list).
"""

from __future__ import annotations

from vidtx.config import PipelineConfig
from vidtx.tracking.runs import resolve_tracking_uri

LOCAL_MLFLOW_UI = "http://127.0.0.1:5000"  # where `make ui` serves the MLflow UI
WORKFLOW = "workflowType=machine_learning"  # the UI's model-training view (runs, models, registry)


def mlflow_ui(config: PipelineConfig) -> str:
    """`tracking.ui_url`, else the tracking server when it is one, else the local UI of `make ui`."""
    if config.tracking.ui_url:
        return config.tracking.ui_url.rstrip("/")
    uri = resolve_tracking_uri(config)
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else LOCAL_MLFLOW_UI


def experiment_link(config: PipelineConfig, experiment_id: str) -> str:
    """The experiment's page: its runs in the model-training view."""
    return f"{mlflow_ui(config)}/#/experiments/{experiment_id}?{WORKFLOW}"


def run_link(config: PipelineConfig, experiment_id: str, run_id: str) -> str:
    """The run's page."""
    return f"{mlflow_ui(config)}/#/experiments/{experiment_id}/runs/{run_id}?{WORKFLOW}"


def artifact_link(config: PipelineConfig, experiment_id: str, run_id: str, path: str) -> str:
    return f"{mlflow_ui(config)}/#/experiments/{experiment_id}/runs/{run_id}/artifacts/{path}?{WORKFLOW}"


def model_version_link(config: PipelineConfig, name: str, version: str) -> str:
    return f"{mlflow_ui(config)}/#/models/{name}/versions/{version}?{WORKFLOW}"
