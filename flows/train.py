"""`train-model`: Ray Train + DeepSpeed training, followed from Prefect.

The Ray run is named after the flow run (unless `train.run_name` is set), and the MLflow run is tagged
with it: a retried flow run resumes the same training from its latest checkpoint instead of starting
over. Progress goes to a progress artifact and the flow's log while Ray trains.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.client.schemas.objects import State
from prefect.runtime import flow_run

from flows.cancellation import cancellable, cancelled
from flows.forms import TrainForm, config_of
from flows.lineage import lineage_table
from vidtx.config import PipelineConfig
from vidtx.stages.train import train
from vidtx.tracking.lineage import FLOW_RUN_TAG, run_lineage
from vidtx.train.payload import TrainResult
from vidtx.train.progress import ProgressCallback

SHOWN_METRICS = ("train/loss", "train/clips_per_second", "train/data_wait")


def named_run(config: PipelineConfig) -> PipelineConfig:
    """`config` with `train.run_name` set: its own, else `<config name>-<flow run id>`, which stays the
    same across retries of the flow run."""
    return config.for_run(config.train.run_name or f"{config.name}-{flow_run.id}")


@contextlib.contextmanager
def follow_training(config: PipelineConfig) -> Iterator[ProgressCallback]:
    """A progress artifact and a line in the task run's log per progress report of the training run
    the block starts; the artifact at 100% when the block ends without error."""
    logger = get_run_logger()
    progress_id = create_progress_artifact(0.0, description=f"training {config.train.run_name}")
    logged_step = -1

    def on_progress(step: int, max_steps: int, metrics: dict[str, float], validation: str | None) -> None:
        """One line per event: a step not logged yet, then a validation result (which a later poll
        may bring for a step already logged)."""
        nonlocal logged_step
        update_progress_artifact(progress_id, 100.0 * step / max_steps)
        if step > logged_step:
            shown = {k: v for k, v in metrics.items() if k in SHOWN_METRICS}
            logger.info(
                f"step {step}/{max_steps} " + " ".join(f"{k} {v:.4g}" for k, v in sorted(shown.items()))
            )
            logged_step = step
        if validation:
            logger.info(validation)

    yield on_progress
    update_progress_artifact(progress_id, 100.0)


def flow_run_tags() -> dict[str, str]:
    """The MLflow tags that tie a training run to this flow run."""
    return {FLOW_RUN_TAG: str(flow_run.id), "prefect.flow_run_name": str(flow_run.name)}


def log_outcome(config: PipelineConfig, result: TrainResult, *more: str) -> None:
    """The flow run's log ends with what the training produced: its run, checkpoints, metrics, link."""
    lineage = run_lineage(config, result.mlflow_run_id)
    for line in [*result.summary().splitlines(), f"MLflow run:  {lineage.mlflow_run_url}", *more]:
        get_run_logger().info("%s", line)


@task(retries=0)  # a retry would repeat expensive work; the flow run's own retry resumes instead
@cancellable
def run_training(config: PipelineConfig) -> TrainResult:
    with follow_training(config) as progress:
        return train(config, tags=flow_run_tags(), progress=progress)


@flow(name="train-model", retries=1, retry_delay_seconds=30, log_prints=True)
def train_model(settings: TrainForm) -> TrainResult | State:
    """Train the config on Ray (a local instance, or the cluster at RAY_ADDRESS /
    train.cluster.address). A cancel stops the training and ends the run Cancelled
    (flows.cancellation)."""
    config = config_of(settings)
    if isinstance(config, State):
        return config
    run_config = named_run(config)
    training = run_training(run_config, return_state=True)
    if training.is_cancelled():
        return cancelled(training)
    result = training.result()
    create_markdown_artifact(
        lineage_table(run_config, result.mlflow_run_id),
        key="lineage",
        description=f"Lineage of training run {result.run_name}",
    )
    log_outcome(run_config, result)
    return result
