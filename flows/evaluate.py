"""`evaluate-model` and `register-model`: multi-view evaluation and the MLflow Model Registry."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact

from vidtx import storage
from vidtx.config import PipelineConfig
from vidtx.config.sections import sections_config
from vidtx.eval.report import render_results
from vidtx.results import EvalResult, ModelVersionInfo
from vidtx.stages.evaluate import evaluate_trained
from vidtx.stages.register import register_trained
from vidtx.stages.trained_model import TrainedRun, find_trained_run
from vidtx.tracking.links import artifact_link, model_version_link, run_link

EvaluateModelConfig = sections_config(
    "evaluate",
    "EvaluateModelConfig",
    "Multi-view evaluation of a trained model: which one, on which split, how.",
)
RegisterModelConfig = sections_config(
    "register",
    "RegisterModelConfig",
    "A trained model into the MLflow Model Registry: evaluated, registered, its aliases moved.",
)


@task(retries=2, retry_delay_seconds=10)
def find_trained(config: PipelineConfig, checkpoint: str | None) -> TrainedRun:
    return find_trained_run(config, checkpoint)


@task(retries=0)
def run_evaluation(config: PipelineConfig, trained: TrainedRun) -> EvalResult:
    return evaluate_trained(config, trained)


def evaluation_markdown(config: PipelineConfig, trained: TrainedRun, result: EvalResult) -> str:
    lines = [
        f"# Evaluation on `{result.split}`",
        "",
        render_results(result),
        "",
        f"Checkpoint `{trained.checkpoint}`.",
    ]
    if trained.mlflow_run_id and trained.experiment_id:
        confusion = artifact_link(
            config, trained.experiment_id, trained.mlflow_run_id, f"eval/{result.split}/confusion_matrix.png"
        )
        lines += [
            "",
            f"- [MLflow run]({run_link(config, trained.experiment_id, trained.mlflow_run_id)})",
            f"- [Confusion matrix]({confusion})",
        ]
    return "\n".join(lines)


@flow(name="evaluate-model", log_prints=True)
def evaluate_model(config: EvaluateModelConfig, checkpoint: str | None = None) -> EvalResult:
    """Evaluate `checkpoint` (default: the best checkpoint of `train.run_name`) on `eval.split`."""
    storage.configure(config.storage.endpoint_url, config.storage.region)  # before any s3:// location
    config = config.pipeline()
    trained = find_trained(config, checkpoint)
    result = run_evaluation(config, trained)
    create_markdown_artifact(
        evaluation_markdown(config, trained, result), key="evaluation", description=f"{result.split} metrics"
    )
    return result


@flow(name="register-model", log_prints=True)
def register_model(
    config: RegisterModelConfig, checkpoint: str | None = None, evaluation: EvalResult | None = None
) -> ModelVersionInfo:
    """Register the model of `checkpoint` (default: the best of `train.run_name`); evaluates it first
    unless `evaluation` is given. `champion` moves only to a version that beats it on the same split."""
    storage.configure(config.storage.endpoint_url, config.storage.region)  # before any s3:// location
    config = config.pipeline()
    trained = find_trained(config, checkpoint)
    result = evaluation or run_evaluation(config, trained)
    version = register_trained(config, trained, result)
    create_link_artifact(
        model_version_link(config, version.name, version.version),
        link_text=f"{version.name} v{version.version}",
        description=f"aliases: {version.alias_text}; {version.reason}",
    )
    return version
