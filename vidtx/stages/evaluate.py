"""The evaluation stage: the trained model on `eval.split`, logged into the training run."""

from __future__ import annotations

from vidtx.config import PipelineConfig
from vidtx.eval.multiview import evaluate
from vidtx.eval.report import render_results
from vidtx.results import EvalResult
from vidtx.stages.register import register_trained
from vidtx.stages.trained_model import TrainedRun, find_trained_run
from vidtx.tracking.evaluation import log_evaluation
from vidtx.train.splits import evaluation_split
from vidtx.train.starting_weights import readable_model


def evaluate_trained(config: PipelineConfig, trained: TrainedRun) -> EvalResult:
    """Evaluate and, when the training run is known, log metrics and reports into its MLflow run."""
    manifest = evaluation_split(config)  # a missing split fails before the model is loaded
    # with the label set it was trained for; one line naming the setting when it cannot be read
    model = readable_model(config, trained.checkpoint, trained.setting)
    multi_label = config.model.task == "multi_label"
    result = evaluate(model.module.eval(), manifest, config.data, config.eval, model.class_names, multi_label)
    if trained.mlflow_run_id:
        log_evaluation(trained.client, trained.mlflow_run_id, result)
    return result


def evaluate_run(config: PipelineConfig, checkpoint: str | None, register: bool) -> str:
    """`vidtx evaluate` / `vidtx register`: evaluate the run's checkpoint (or `checkpoint`) and, with
    `register`, register it; the report to print."""
    trained = find_trained_run(config, checkpoint)
    result = evaluate_trained(config, trained)
    lines = [render_results(result)]
    if trained.mlflow_run_id:
        lines.append(f"logged to MLflow run {trained.mlflow_run_id}")
    if register:
        lines.append(register_trained(config, trained, result).summary())
    return "\n".join(lines)
