"""One trial of a sweep, and what the sweep's driver does when a trial ends.

A trial is a Ray Tune function (Ray Train V2's way of tuning a trainer): it trains the sweep's config
with the trial's values for `sweep.objective` (a classifier, or a pretraining) through the same
launcher as `vidtx train`, as the training run
`<sweep name>-<trial id>`, nested under the sweep's MLflow run. Ray Tune's `TuneReportCallback` hands
each checkpoint's report (step, val_top1 or val_map, val_loss, the checkpoint's path) to the Tuner, where the
scheduler decides. A trial runs in an actor of its own; Ray Train's controller and workers are its
children, so a trial that the scheduler stops takes its training down with it.
"""

from __future__ import annotations

from typing import Any

import ray.tune
from pydantic import BaseModel
from ray.tune.experiment import Trial
from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY, TuneReportCallback

from vidtx.config import PipelineConfig
from vidtx.stages.train import train
from vidtx.tracking.runs import connect, find_run
from vidtx.tracking.sweeps import end_trial_run, trial_tags
from vidtx.train.payload import TrainResult, checkpoint_uri

REPORTED = ("step", "val_top1", "val_map", "val_loss")  # what a training's checkpoints report (train.loop)


class SweepPlan(BaseModel):
    """What every trial is given: the sweep's config (absolute paths), its name and MLflow parent run."""

    config: PipelineConfig
    sweep_name: str
    parent_run_id: str
    tracking_uri: str

    def trial_run_name(self, trial_id: str) -> str:
        return f"{self.sweep_name}-{trial_id}"

    def trial_config(self, values: dict[str, Any]) -> PipelineConfig:
        return self.config.for_trial(values)


def run_trial(values: dict[str, Any], plan: dict[str, Any]) -> None:
    """A trial (a Ray Tune function): train `plan`'s config with `values`, reporting to Tune.

    A trial whose training finished before the sweep was stopped (Tune saves its own state every
    few seconds, so it may not know) reports that training's result instead of starting it again.
    """
    sweep = SweepPlan.model_validate(plan)
    trial_id = ray.tune.get_context().get_trial_id()
    config, run_name = sweep.trial_config(values), sweep.trial_run_name(trial_id)
    try:
        finished = TrainResult.load(config.train.storage_path, run_name)
    except FileNotFoundError:
        finished = None
    if finished is not None:
        ray.tune.report(finished.metrics)
        return
    tags = trial_tags(sweep.sweep_name, sweep.parent_run_id, trial_id)
    train(
        config,
        run_name=run_name,
        tags=tags,
        callbacks=[TuneReportCallback()],
        objective=sweep.config.sweep.objective,
    )


class TrialEnds(ray.tune.Callback):
    """On the sweep's driver, when Ray Tune ends a trial: record the ends its own process may not have.

    A trial that the scheduler stops is killed with its process (its training's MLflow run would stay
    RUNNING): its run is ended KILLED with why and the checkpoint it kept, and its result saved as a
    finished training's (`TrainResult`), which is how the trial, started again by a resumed sweep
    whose Tune state predates the stop, knows not to train again (`run_trial`). One stopped at its
    last report, and one that finished but was ended before it recorded so, get their ends too.
    """

    def __init__(self, plan: SweepPlan, scheduler: str) -> None:
        self.plan = plan
        self.scheduler = scheduler

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        config = self.plan.trial_config(trial.config)
        result = trial.last_result or {}
        step, max_steps = int(result.get("step", 0)), config.train.max_steps
        run_name = self.plan.trial_run_name(trial.trial_id)
        if TrainResult.exists(config.train.storage_path, run_name):
            return  # it finished and recorded itself
        client = connect(self.plan.tracking_uri)
        if (run := find_run(client, config.tracking.experiment, run_name)) is None:
            return  # it ended before its training made its run
        checkpoint_path = result.get(CHECKPOINT_PATH_KEY)
        checkpoint = checkpoint_uri(config.train.storage_path, checkpoint_path) if checkpoint_path else None
        TrainResult(  # first: a sweep stopped from here on finds the trial ended
            run_name=run_name,
            storage_path=config.train.storage_path,
            checkpoint=checkpoint,
            best_checkpoint=None,
            metrics={key: result[key] for key in REPORTED if key in result},
            mlflow_run_id=run.info.run_id,
            tracking_uri=self.plan.tracking_uri,
        ).save()
        sweep = self.plan.config.sweep
        reason = (
            f"stopped early by the sweep's {self.scheduler} scheduler at step {step} of {max_steps} "
            f"({sweep.metric} {result.get(sweep.metric, float('nan')):.4g}, {sweep.mode} wins)"
            if step < max_steps
            else None
        )
        end_trial_run(client, run.info.run_id, reason, checkpoint, "KILLED" if reason else "FINISHED")

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        client = connect(self.plan.tracking_uri)
        run = find_run(client, self.plan.config.tracking.experiment, self.plan.trial_run_name(trial.trial_id))
        if run is not None:
            reason = f"the trial failed (its error: {trial.error_file or 'the sweep log'})"
            end_trial_run(client, run.info.run_id, reason, None, "FAILED")
