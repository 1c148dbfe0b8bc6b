"""`sweep-model`: a hyperparameter sweep on Ray Tune, followed from Prefect.

The sweep is named after the flow run (unless `sweep.name` is set): a retried flow run, or one started
again with the same `sweep.name`, resumes it (`Tuner.restore`). Its trials table (values, metric,
state, steps, a link to each MLflow run) is the run's artifact.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.client.schemas.objects import State
from prefect.runtime import flow_run

from flows.cancellation import cancellable, cancelled
from flows.forms import SweepForm, config_of
from vidtx.config import PipelineConfig
from vidtx.stages.sweep import run_sweep
from vidtx.stages.sweep_result import SweepResult
from vidtx.tracking.links import experiment_link, model_version_link, run_link
from vidtx.tracking.sweeps import TrialRow


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
            f"{result.evaluation_text(config.eval.split)}; "
            f"[{version.name} v{version.version}]({model_version_link(config, version.name, version.version)}) "
            f"aliases {version.alias_text} ({version.reason}).",
            "",
            result.table(run_cell),
            "",
            f"[The sweep in MLflow]({experiment_link(config, result.experiment_id)}): the trials are nested "
            f"under run [{result.name}]({run_link(config, result.experiment_id, result.parent_run_id)}).",
        ]
    )


def outcome_lines(config: PipelineConfig, result: SweepResult) -> list[str]:
    """The lines the flow run's log ends with: each trial's values and metric with its MLflow run, the
    best trial, what was registered, where the sweep is in MLflow."""
    lines = [f"sweep {result.name}: {len(result.trials)} trials, best {result.best.run_name}"]
    for row in result.trials:
        values = ", ".join(f"{key}={value}" for key, value in sorted(row.values.items()))
        metric = "none" if row.metric is None else f"{row.metric:.4g}"
        run = run_link(config, result.experiment_id, row.mlflow_run_id) if row.mlflow_run_id else "no run"
        best = " (best)" if row.trial_id == result.best.trial_id else ""
        lines.append(
            f"trial {row.trial_id}{best}: {values}: {result.metric} {metric}, {row.state} at step {row.steps}; {run}"
        )
    version = result.version
    return [
        *lines,
        result.evaluation_text(config.eval.split),
        f"{version.summary()}; {model_version_link(config, version.name, version.version)}",
        f"the sweep in MLflow: {run_link(config, result.experiment_id, result.parent_run_id)}",
    ]


@flow(name="sweep-model", retries=1, retry_delay_seconds=30, log_prints=True)
def sweep_model(settings: SweepForm) -> SweepResult | State:
    """Search `sweep.space` with Ray Tune (a local Ray, or the cluster at RAY_ADDRESS /
    train.cluster.address); evaluate and register the best trial. A cancel stops every trial and
    ends the run Cancelled; the same sweep name resumes it."""
    run_config = config_of(settings)
    if isinstance(run_config, State):
        return run_config
    run_config.sweep.name = run_config.sweep.name or f"{run_config.name}-sweep-{flow_run.id}"
    sweep = run_trials(run_config, return_state=True)
    if sweep.is_cancelled():
        return cancelled(sweep)
    result = sweep.result()
    create_markdown_artifact(
        trials_markdown(run_config, result), key="sweep-trials", description=f"Trials of sweep {result.name}"
    )
    for line in outcome_lines(run_config, result):
        get_run_logger().info("%s", line)  # the run's log ends with the trials, the best and its version
    return result
