"""`sweep-model`: a hyperparameter sweep on Ray Tune, followed from Prefect.

The sweep is named after the flow run (unless `sweep.name` is set): a retried flow run, or one started
again with the same `sweep.name`, resumes it (`Tuner.restore`). Its trials table (values, metric,
state, steps, a link to each MLflow run) is the run's artifact.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.client.schemas.objects import State
from prefect.runtime import flow_run

from flows.cancellation import cancellable, cancelled
from vidtx import storage
from vidtx.config import PipelineConfig
from vidtx.config.sections import sections_config
from vidtx.stages.sweep import run_sweep
from vidtx.stages.sweep_result import SweepResult
from vidtx.tracking.links import experiment_link, model_version_link, run_link
from vidtx.tracking.sweeps import TrialRow

SweepModelConfig = sections_config(
    "sweep",
    "SweepModelConfig",
    "A hyperparameter sweep: the space, how many trials and how many at once, which stop early; "
    "the training each trial runs; the best trial evaluated and registered.",
)


@task(retries=0)  # the flow run's own retry resumes the sweep instead
@cancellable
def run_trials(config: PipelineConfig) -> SweepResult:
    return run_sweep(config)


def trials_markdown(config: PipelineConfig, result: SweepResult) -> str:
    """The artifact: the best trial and its model version, then every trial, each linking its run."""

    def run_cell(row: TrialRow) -> str:
        if row.mlflow_run_id is None:
            return "none"
        return f"[{row.run_name}]({run_link(config, result.experiment_id, row.mlflow_run_id)})"

    version = result.version
    return "\n".join(
        [
            f"# Sweep `{result.name}`",
            "",
            f"Best: `{result.best.run_name}` ({result.metric} {result.best.metric:.4g}); "
            f"{config.eval.split} top-1 {result.evaluation['top1']:.3f}; "
            f"[{version.name} v{version.version}]({model_version_link(config, version.name, version.version)}) "
            f"aliases {version.alias_text} ({version.reason}).",
            "",
            result.table(run_cell),
            "",
            f"[The sweep in MLflow]({experiment_link(config, result.experiment_id)}): the trials are nested "
            f"under run [{result.name}]({run_link(config, result.experiment_id, result.parent_run_id)}).",
        ]
    )


@flow(name="sweep-model", retries=1, retry_delay_seconds=30, log_prints=True)
def sweep_model(config: SweepModelConfig) -> SweepResult | State:
    """Search `sweep.space` with Ray Tune (a local Ray, or the cluster at RAY_ADDRESS /
    train.cluster.address); evaluate and register the best trial. A cancel stops every trial and
    ends the run Cancelled; the same sweep name resumes it."""
    storage.configure(config.storage.endpoint_url, config.storage.region)  # before any s3:// location
    run_config = config.pipeline()
    run_config.sweep.name = run_config.sweep.name or f"{run_config.name}-sweep-{flow_run.id}"
    sweep = run_trials(run_config, return_state=True)
    if sweep.is_cancelled():
        return cancelled(sweep)
    result = sweep.result()
    create_markdown_artifact(
        trials_markdown(run_config, result), key="sweep-trials", description=f"Trials of sweep {result.name}"
    )
    return result
