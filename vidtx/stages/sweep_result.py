"""What a sweep produced: its trials as a table, the best trial evaluated and registered (a pretraining
sweep's: its encoder registered)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import ray.tune
from mlflow import MlflowClient
from pydantic import BaseModel

from vidtx.markdown import markdown_table
from vidtx.results import ModelVersionInfo
from vidtx.stages.evaluate import evaluate_trained
from vidtx.stages.pretrain import register_pretrained
from vidtx.stages.register import register_trained
from vidtx.stages.sweep_trial import SweepPlan
from vidtx.stages.trained_model import find_trained_run
from vidtx.tracking.sweeps import TrialRow, finish_sweep_run, trial_runs


def trial_rows(plan: SweepPlan, grid: ray.tune.ResultGrid, client: MlflowClient) -> list[TrialRow]:
    """Each trial of the finished Tuner: its values, best metric, how it ended, its MLflow run."""
    sweep = plan.config.sweep
    runs = trial_runs(client, plan.parent_run_id)
    rows = []
    for result in grid:
        trial_id = str(result.metrics.get("trial_id") or Path(result.path).name)  # no report: its folder
        run_name = plan.trial_run_name(trial_id)
        history = result.metrics_dataframe
        values = history[sweep.metric].dropna() if history is not None and sweep.metric in history else []
        best = (max if sweep.mode == "max" else min)(values) if len(values) else None
        steps = int(result.metrics.get("step", 0))
        if result.error is not None:
            state = f"error: {str(result.error).strip().splitlines()[0]}"
        else:
            state = (
                "finished" if steps >= plan.trial_config(result.config).train.max_steps else "stopped early"
            )
        run = runs.get(trial_id)
        rows.append(
            TrialRow(
                trial_id=trial_id,
                run_name=run_name,
                values=result.config,
                metric=None if best is None else float(best),
                state=state,
                steps=steps,
                mlflow_run_id=run.info.run_id if run else None,
            )
        )
    return sorted(rows, key=lambda row: row.trial_id)


class SweepResult(BaseModel):
    """The trials of a sweep and what became of its best one (`vidtx sweep` prints it)."""

    name: str
    metric: str
    mode: str
    parent_run_id: str
    experiment_id: str
    trials: list[TrialRow]
    best: TrialRow
    evaluation: dict[str, float]  # the best trial's evaluation on `eval.split` (none for a pretraining)
    version: ModelVersionInfo  # the best trial's classifier, or its encoder

    @classmethod
    def conclude(cls, plan: SweepPlan, rows: list[TrialRow], client: MlflowClient) -> SweepResult:
        """Evaluate and register the best trial, record the sweep on its parent run and end it."""
        sweep = plan.config.sweep
        scored = [row for row in rows if row.metric is not None and not row.state.startswith("error")]
        if not scored:
            raise RuntimeError(f"sweep {plan.sweep_name}: no trial reported {sweep.metric}")
        best = (max if sweep.mode == "max" else min)(scored, key=lambda row: row.metric)
        config = plan.trial_config(best.values).for_run(best.run_name)
        trained = find_trained_run(config)
        if sweep.objective == "masked_autoencoding":
            evaluation, version = {}, register_pretrained(config, trained)
        else:
            evaluated = evaluate_trained(config, trained)
            evaluation, version = evaluated.metrics(), register_trained(config, trained, evaluated)
        result = cls(
            name=plan.sweep_name,
            metric=sweep.metric,
            mode=sweep.mode,
            parent_run_id=plan.parent_run_id,
            experiment_id=client.get_run(plan.parent_run_id).info.experiment_id,
            trials=rows,
            best=best,
            evaluation=evaluation,
            version=version,
        )
        finish_sweep_run(
            client, plan.parent_run_id, sweep.metric, best, result.table(lambda row: row.run_name)
        )
        return result

    def table(self, run_cell: Callable[[TrialRow], str]) -> str:
        """The trials as a Markdown table; `run_cell` writes each trial's MLflow run (a name, a link)."""
        keys = sorted({key for row in self.trials for key in row.values})
        header = ["trial", *keys, self.metric, "state", "steps", "MLflow run"]
        rows = [
            [
                row.trial_id + (" (best)" if row.trial_id == self.best.trial_id else ""),
                *(f"{row.values.get(key, '')}" for key in keys),
                "" if row.metric is None else f"{row.metric:.4g}",
                row.state,
                row.steps,
                run_cell(row),
            ]
            for row in self.trials
        ]
        return markdown_table(header, rows)

    def evaluation_text(self, split: str | None = None) -> str:
        where = f" on {split}" if split else ""
        if "mean_ap" in self.evaluation:
            return f"best trial evaluated{where}: mAP {self.evaluation['mean_ap']:.3f}"
        if "top1" not in self.evaluation:
            return "a pretraining sweep: the best trial's encoder registered, nothing to evaluate"
        return f"best trial evaluated{where}: top-1 {self.evaluation['top1']:.3f}"

    def summary(self) -> str:
        """What `vidtx sweep` prints."""
        return "\n".join(
            [
                f"sweep {self.name}: {len(self.trials)} trials, "
                f"{sum(row.state == 'stopped early' for row in self.trials)} stopped early; "
                f"best {self.best.run_name} ({self.metric} {self.best.metric:.4g})",
                self.table(lambda row: row.mlflow_run_id or "none"),
                f"{self.evaluation_text()}; {self.version.summary()}",
                f"MLflow: parent run {self.parent_run_id} (the trials are nested under it)",
            ]
        )
