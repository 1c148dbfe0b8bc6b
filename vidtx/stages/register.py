"""The registry stage: log the evaluated model into its training run, register it, move the aliases;
with `registry.export_onnx`, export the new version to ONNX and log that to it (`vidtx.stages.export`)."""

from __future__ import annotations

import logging

from vidtx.config import PipelineConfig
from vidtx.results import EvalResult, ModelVersionInfo
from vidtx.stages.export import export_registered
from vidtx.stages.trained_model import TrainedRun, load_trained_model
from vidtx.tracking.model_registry import register

logger = logging.getLogger(__name__)


def register_trained(config: PipelineConfig, trained: TrainedRun, result: EvalResult) -> ModelVersionInfo:
    """Log the weights of `trained` as an MLflow model, register a version and move the aliases."""
    if trained.mlflow_run_id is None:
        raise ValueError("registering needs the training run's MLflow run: set train.run_name")
    model = load_trained_model(config, trained.checkpoint)
    version = register(model, config, result, client=trained.client, run_id=trained.mlflow_run_id)
    if config.registry.export_onnx:
        logger.info("%s v%s %s", version.name, version.version, export_registered(config, version).summary())
    return version
