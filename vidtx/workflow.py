"""The evaluate and register stages as the CLI and the Prefect flows run them.

Both find the training run's MLflow run by `train.run_name`, so results land next to the training
metrics, and both accept an explicit checkpoint (a Ray checkpoint directory or URI, a vidtx `.pt`
file, or `models:/name@alias`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlflow import MlflowClient

from vidtx.config import PipelineConfig
from vidtx.eval.evaluate import EvalResult, evaluate, load_trained_model
from vidtx.tracking.evaluation import log_evaluation
from vidtx.tracking.registry import ModelVersionInfo, register
from vidtx.tracking.runs import connect, find_run, resolve_tracking_uri


@dataclass
class TrainedRun:
    """Where a training run's weights are and which MLflow run records it."""

    checkpoint: str
    mlflow_run_id: str | None
    client: MlflowClient


def locate(config: PipelineConfig, checkpoint: str | None = None) -> TrainedRun:
    """The checkpoint to use (argument > `eval.checkpoint` > the best checkpoint of `train.run_name`)."""
    client = connect(resolve_tracking_uri(config))
    run = (
        find_run(client, config.tracking.experiment, config.train.run_name) if config.train.run_name else None
    )
    tags = run.data.tags if run else {}
    chosen = (
        checkpoint
        or config.eval.checkpoint
        or tags.get("vidtx.best_checkpoint")
        or tags.get("vidtx.checkpoint")
    )
    if not chosen:
        raise ValueError(
            "no checkpoint to evaluate: pass one, set eval.checkpoint, or set train.run_name to a finished "
            f"training run in experiment '{config.tracking.experiment}'"
        )
    return TrainedRun(chosen, run.info.run_id if run else None, client)


def evaluate_trained(config: PipelineConfig, trained: TrainedRun) -> EvalResult:
    """Evaluate and, when the training run is known, log metrics and reports into its MLflow run."""
    result = evaluate(config, trained.checkpoint)
    if trained.mlflow_run_id:
        log_evaluation(trained.client, trained.mlflow_run_id, result)
    return result


def register_trained(config: PipelineConfig, trained: TrainedRun, result: EvalResult) -> ModelVersionInfo:
    """Log the evaluated weights as an MLflow model, register a version and move the aliases."""
    if trained.mlflow_run_id is None:
        raise ValueError("registering needs the training run's MLflow run: set train.run_name")
    model = load_trained_model(config, trained.checkpoint)
    return register(model, config, result, client=trained.client, run_id=trained.mlflow_run_id)
