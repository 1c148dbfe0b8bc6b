"""The evaluation stage: the trained model on `eval.split`, logged into the training run."""

from __future__ import annotations

from vidtx.config import PipelineConfig
from vidtx.eval.evaluate import EvalResult, evaluate
from vidtx.manifest import load_manifest
from vidtx.stages.trained_model import TrainedRun, load_trained_model
from vidtx.tracking.evaluation import log_evaluation


def evaluate_trained(config: PipelineConfig, trained: TrainedRun) -> EvalResult:
    """Evaluate and, when the training run is known, log metrics and reports into its MLflow run."""
    model = load_trained_model(config, trained.checkpoint)
    manifest = load_manifest(config.data.shards, config.eval.split)
    result = evaluate(model, manifest, config.data, config.eval)
    if trained.mlflow_run_id:
        log_evaluation(trained.client, trained.mlflow_run_id, result)
    return result
