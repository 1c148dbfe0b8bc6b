"""`evaluate-model` and `register-model`: multi-view evaluation and the MLflow Model Registry."""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact
from prefect.client.schemas.objects import State

from flows.forms import EvaluateForm, RegisterForm, config_of
from vidtx.config import PipelineConfig
from vidtx.eval.report import render_results
from vidtx.results import EvalResult, ModelVersionInfo
from vidtx.stages.evaluate import evaluate_trained
from vidtx.stages.register import register_trained
from vidtx.stages.trained_model import TrainedRun, find_trained_run
from vidtx.tracking.links import artifact_link, model_version_link, run_link


@task(retries=2, retry_delay_seconds=10)
def find_trained(config: PipelineConfig) -> TrainedRun:
    return find_trained_run(config)


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


@task(retries=0)
def register(config: PipelineConfig, trained: TrainedRun, result: EvalResult) -> ModelVersionInfo:
    """Register the evaluated model and move its aliases; a link artifact to the version."""
    version = register_trained(config, trained, result)
    create_link_artifact(
        model_version_link(config, version.name, version.version),
        link_text=f"{version.name} v{version.version}",
        description=f"aliases: {version.alias_text}; {version.reason}",
    )
    return version


@flow(name="evaluate-model", log_prints=True)
def evaluate_model(settings: EvaluateForm) -> EvalResult | State:
    """Evaluate `eval.checkpoint` (empty: the best checkpoint of `train.run_name`) on `eval.split`."""
    config = config_of(settings)
    if isinstance(config, State):
        return config
    trained = find_trained(config)
    result = run_evaluation(config, trained)
    create_markdown_artifact(
        evaluation_markdown(config, trained, result), key="evaluation", description=f"{result.split} metrics"
    )
    for line in [*render_results(result).splitlines(), f"checkpoint {trained.checkpoint}"]:
        get_run_logger().info("%s", line)  # the run's log ends with the results
    return result


@flow(name="register-model", log_prints=True)
def register_model(settings: RegisterForm) -> ModelVersionInfo | State:
    """Evaluate the model of `eval.checkpoint` (empty: the best of `train.run_name`), register it and
    move the aliases: `champion` moves only to a version that beats it on the same split."""
    config = config_of(settings)
    if isinstance(config, State):
        return config
    trained = find_trained(config)
    version = register(config, trained, run_evaluation(config, trained))
    get_run_logger().info(
        "%s; %s", version.summary(), model_version_link(config, version.name, version.version)
    )
    return version
