"""The evaluation stage: the trained model on `eval.split`, logged into the training run."""

from __future__ import annotations

from vidtx.config import PipelineConfig
from vidtx.eval.evaluate import EvalResult, evaluate
from vidtx.stages.trained_model import TrainedRun, load_trained_model
from vidtx.tracking.evaluation import log_evaluation
from vidtx.train.splits import evaluation_split


def evaluate_trained(config: PipelineConfig, trained: TrainedRun) -> EvalResult:
    """Evaluate and, when the training run is known, log metrics and reports into its MLflow run."""
    manifest = evaluation_split(config)  # a missing split fails before the model is loaded
    model = load_trained_model(config, trained.checkpoint)
    result = evaluate(model, manifest, config.data, config.eval)
    if trained.mlflow_run_id:
        log_evaluation(trained.client, trained.mlflow_run_id, result)
    return result
