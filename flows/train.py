"""`train-model`: Ray Train + DeepSpeed training, followed from Prefect.

The Ray run is named after the flow run (unless `train.run_name` is set), and the MLflow run is tagged
with it: a retried flow run resumes the same training from its latest checkpoint instead of starting
over. Progress goes to a progress artifact and the flow's log while Ray trains.
"""

from __future__ import annotations

from mlflow import MlflowClient
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_progress_artifact, update_progress_artifact
from prefect.runtime import flow_run

from flows.defaults import DEMO
from flows.links import run_link
from vidtx.config import PipelineConfig
from vidtx.train.launcher import TrainResult, train


def run_name_for(config: PipelineConfig) -> str:
    """`train.run_name`, else `<config name>-<flow run id>`: stable across retries of the flow run."""
    return config.train.run_name or f"{config.name}-{flow_run.id}"


@task(retries=0)  # a retry would repeat expensive work; the flow run's own retry resumes instead
def run_training(config: PipelineConfig, run_name: str) -> TrainResult:
    logger = get_run_logger()
    progress_id = create_progress_artifact(0.0, description=f"training {run_name}")

    def on_progress(step: int, max_steps: int, metrics: dict[str, float]) -> None:
        update_progress_artifact(progress_id, 100.0 * step / max_steps)
        shown = {k: v for k, v in metrics.items() if k.startswith(("train/loss", "train/clips", "val/top1"))}
        logger.info(
            "step %d/%d %s", step, max_steps, " ".join(f"{k} {v:.4g}" for k, v in sorted(shown.items()))
        )

    tags = {"prefect.flow_run_id": str(flow_run.id), "prefect.flow_run_name": str(flow_run.name)}
    result = train(config, run_name=run_name, tags=tags, progress=on_progress)
    update_progress_artifact(progress_id, 100.0)
    return result


@flow(name="train-model", retries=1, retry_delay_seconds=30, log_prints=True)
def train_model(config: PipelineConfig = DEMO) -> TrainResult:
    """Train `config` on Ray (a local instance, or the cluster at RAY_ADDRESS / train.cluster.address)."""
    config = config.model_copy(deep=True)
    config.train.run_name = run_name_for(config)
    result = run_training(config, config.train.run_name)
    experiment_id = MlflowClient(result.tracking_uri).get_run(result.mlflow_run_id).info.experiment_id
    create_link_artifact(
        run_link(config, experiment_id, result.mlflow_run_id),
        link_text=f"MLflow run of {result.run_name}",
        description="Training metrics, config and lineage",
    )
    return result
