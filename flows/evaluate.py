"""`evaluate-model` and `register-model`: multi-view evaluation and the MLflow Model Registry."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact

from flows.defaults import DEMO
from flows.links import artifact_link, model_version_link, run_link
from vidtx.config import PipelineConfig
from vidtx.eval.evaluate import EvalResult
from vidtx.tracking.registry import ModelVersionInfo
from vidtx.workflow import TrainedRun, evaluate_trained, locate, register_trained


@task(retries=2, retry_delay_seconds=10)
def find_trained(config: PipelineConfig, checkpoint: str | None) -> TrainedRun:
    return locate(config, checkpoint)


@task(retries=0)
def run_evaluation(config: PipelineConfig, trained: TrainedRun) -> EvalResult:
    return evaluate_trained(config, trained)


def evaluation_markdown(config: PipelineConfig, trained: TrainedRun, result: EvalResult) -> str:
    rows = "\n".join(
        f"| {name}{' (primary)' if name == result.primary else ''} | {m.top1:.4f} | {m.top5:.4f} "
        f"| {m.mean_class_accuracy:.4f} |"
        for name, m in result.by_ensemble.items()
    )
    lines = [
        f"# Evaluation on `{result.split}`",
        "",
        f"{result.num_videos} videos ({result.num_skipped} skipped), {result.views} views (clips x crops), "
        f"loss {result.loss:.4f}, checkpoint `{result.checkpoint}`.",
        "",
        "| ensemble | top-1 | top-5 | mean class accuracy |",
        "|---|---|---|---|",
        rows,
    ]
    if trained.mlflow_run_id:
        experiment_id = trained.client.get_run(trained.mlflow_run_id).info.experiment_id
        confusion = artifact_link(
            config, experiment_id, trained.mlflow_run_id, f"eval/{result.split}/confusion_matrix.png"
        )
        lines += [
            "",
            f"- [MLflow run]({run_link(config, experiment_id, trained.mlflow_run_id)})",
            f"- [Confusion matrix]({confusion})",
        ]
    return "\n".join(lines)


@flow(name="evaluate-model", log_prints=True)
def evaluate_model(config: PipelineConfig = DEMO, checkpoint: str | None = None) -> EvalResult:
    """Evaluate `checkpoint` (default: the best checkpoint of `train.run_name`) on `eval.split`."""
    trained = find_trained(config, checkpoint)
    result = run_evaluation(config, trained)
    create_markdown_artifact(
        evaluation_markdown(config, trained, result), key="evaluation", description=f"{result.split} metrics"
    )
    return result


@flow(name="register-model", log_prints=True)
def register_model(
    config: PipelineConfig = DEMO, checkpoint: str | None = None, evaluation: EvalResult | None = None
) -> ModelVersionInfo:
    """Register the model of `checkpoint` (default: the best of `train.run_name`); evaluates it first
    unless `evaluation` is given. `champion` moves only to a version that beats it on the same split."""
    trained = find_trained(config, checkpoint)
    result = evaluation or run_evaluation(config, trained)
    version = register_trained(config, trained, result)
    create_link_artifact(
        model_version_link(config, version.name, version.version),
        link_text=f"{version.name} v{version.version}",
        description=f"aliases: {', '.join(version.aliases)}; {version.reason}",
    )
    return version
