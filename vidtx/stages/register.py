"""The registry stage: log the evaluated model into its training run, register it, move the aliases."""

from __future__ import annotations

from vidtx.config import PipelineConfig
from vidtx.results import EvalResult, ModelVersionInfo
from vidtx.stages.trained_model import TrainedRun, load_trained_model
from vidtx.tracking.model_registry import register


def register_trained(config: PipelineConfig, trained: TrainedRun, result: EvalResult) -> ModelVersionInfo:
    """Log the weights of `trained` as an MLflow model, register a version and move the aliases."""
    if trained.mlflow_run_id is None:
        raise ValueError("registering needs the training run's MLflow run: set train.run_name")
    model = load_trained_model(config, trained.checkpoint)
    return register(model, config, result, client=trained.client, run_id=trained.mlflow_run_id)
