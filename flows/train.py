"""`train-model`: Ray Train + DeepSpeed training, followed from Prefect.

The Ray run is named after the flow run (unless `train.run_name` is set), and the MLflow run is tagged
with it: a retried flow run resumes the same training from its latest checkpoint instead of starting
over. Progress goes to a progress artifact and the flow's log while Ray trains.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.client.schemas.objects import State
from prefect.runtime import flow_run
from pydantic import BaseModel

from flows.cancellation import cancellable, cancelled
from flows.lineage import lineage_table
from vidtx import storage
from vidtx.config import PipelineConfig
from vidtx.config.sections import sections_config
from vidtx.stages.train import train
from vidtx.tracking.lineage import FLOW_RUN_TAG
from vidtx.train.payload import TrainResult

TrainModelConfig = sections_config(
    "train",
    "TrainModelConfig",
    "One training run: the shards it reads, the model, how it trains, where it logs.",
)


def named_run(config: PipelineConfig) -> PipelineConfig:
    """`config` with `train.run_name` set: its own, else `<config name>-<flow run id>`, which stays the
    same across retries of the flow run."""
    return config.for_run(config.train.run_name or f"{config.name}-{flow_run.id}")


@task(retries=0)  # a retry would repeat expensive work; the flow run's own retry resumes instead
@cancellable
def run_training(config: PipelineConfig, given: BaseModel) -> TrainResult:
    logger = get_run_logger()
    run_name = config.train.run_name
    progress_id = create_progress_artifact(0.0, description=f"training {run_name}")

    def on_progress(step: int, max_steps: int, metrics: dict[str, float], validation: str | None) -> None:
        update_progress_artifact(progress_id, 100.0 * step / max_steps)
        shown = {
            k: v
            for k, v in metrics.items()
            if k in ("train/loss", "train/clips_per_second", "train/data_wait")
        }
        line = f"step {step}/{max_steps} " + " ".join(f"{k} {v:.4g}" for k, v in sorted(shown.items()))
        logger.info(line + (f"; {validation}" if validation else ""))

    tags = {FLOW_RUN_TAG: str(flow_run.id), "prefect.flow_run_name": str(flow_run.name)}
    result = train(config, tags=tags, progress=on_progress, recorded=given)
    update_progress_artifact(progress_id, 100.0)
    return result


@flow(name="train-model", retries=1, retry_delay_seconds=30, log_prints=True)
def train_model(config: TrainModelConfig) -> TrainResult | State:
    """Train `config` on Ray (a local instance, or the cluster at RAY_ADDRESS / train.cluster.address).
    A cancel stops the training and ends the run Cancelled (flows.cancellation)."""
    storage.configure(config.storage.endpoint_url, config.storage.region)  # before any s3:// location
    run_config = named_run(config.pipeline())
    training = run_training(run_config, config, return_state=True)  # a new MLflow run records `config`
    if training.is_cancelled():
        return cancelled(training)
    result = training.result()
    create_markdown_artifact(
        lineage_table(run_config, result.mlflow_run_id),
        key="lineage",
        description=f"Lineage of training run {result.run_name}",
    )
    return result
