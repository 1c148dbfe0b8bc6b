"""A sweep in MLflow: one parent run, and each trial's training run nested under it.

The parent is a vidtx run like a training's (found again by name, so a resumed sweep keeps it); it
records the config given, the `sweep` section (space, scheduler) among its params. Each trial's
training run carries MLflow's `mlflow.parentRunId`, so the UI lists the trials under the sweep and
its compare view shows their parameters and curves side by side. A trial that the scheduler stops
early is ended here, by the sweep's driver: the trial's own process is gone by then.
"""

from __future__ import annotations

from collections.abc import Mapping

from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from pydantic import BaseModel

from vidtx.config import PipelineConfig
from vidtx.tracking.runs import CHECKPOINT_TAG, END_REASON_TAG, start_or_resume_run

SWEEP_TAG = "vidtx.sweep"  # the sweep's name, on its parent run and on every trial's run
TRIAL_TAG = "vidtx.sweep.trial"  # a trial run's Ray Tune trial id
BEST_TRIAL_TAG = "vidtx.sweep.best_trial"  # on the parent: the run name of the best trial
TRIALS_FILE = "sweep/trials.md"  # the parent's artifact: the trials table


def trial_tags(sweep_name: str, parent_run_id: str, trial_id: str) -> dict[str, str]:
    """The tags that nest a trial's training run under its sweep's parent run."""
    return {MLFLOW_PARENT_RUN_ID: parent_run_id, SWEEP_TAG: sweep_name, TRIAL_TAG: trial_id}


def start_sweep_run(
    client: MlflowClient, config: PipelineConfig, sweep_name: str, tags: Mapping[str, str] | None = None
) -> str:
    """The parent run of sweep `sweep_name`, created or reopened; its id."""
    return start_or_resume_run(
        client, config, sweep_name, {SWEEP_TAG: sweep_name, **(tags or {})}, entry_point="sweep"
    )


def trial_runs(client: MlflowClient, parent_run_id: str) -> dict[str, Run]:
    """The runs nested under a sweep's parent run, by their trial id."""
    parent = client.get_run(parent_run_id)
    runs = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_run_id}'"
    )
    return {run.data.tags[TRIAL_TAG]: run for run in runs if TRIAL_TAG in run.data.tags}


def end_trial_run(
    client: MlflowClient, run_id: str, reason: str | None, checkpoint: str | None, status: str
) -> None:
    """End the run of a trial whose process is gone (stopped early: KILLED, saying why; failed:
    FAILED) with the checkpoint it kept (later stages find it there, as a finished run's)."""
    if checkpoint:
        client.set_tag(run_id, CHECKPOINT_TAG, checkpoint)
    if reason:  # the training's own end, should it come after this one, then leaves it as it is
        client.set_tag(run_id, END_REASON_TAG, reason)
    client.set_terminated(run_id, status=status)


class TrialRow(BaseModel):
    """One trial of a sweep, as the trials table shows it."""

    trial_id: str
    run_name: str
    values: dict[str, int | float | str | bool]  # the sampled value of each key of the space
    metric: float | None  # the trial's best value of the sweep's metric
    state: str  # finished | stopped early | error: <first line>
    steps: int  # optimizer steps trained
    mlflow_run_id: str | None


def finish_sweep_run(
    client: MlflowClient, parent_run_id: str, metric: str, best: TrialRow, table: str
) -> None:
    """Record the best trial and the trials table on the parent run, and end it."""
    client.set_tag(parent_run_id, BEST_TRIAL_TAG, best.run_name)
    if best.metric is not None:
        client.log_metric(parent_run_id, f"best_{metric}", best.metric)
    client.log_text(parent_run_id, table, TRIALS_FILE)
    client.set_terminated(parent_run_id, status="FINISHED")
