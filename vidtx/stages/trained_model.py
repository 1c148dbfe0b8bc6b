"""Which trained model a later stage uses: a checkpoint given, else the best checkpoint of the training
run named by `train.run_name`, found through its MLflow run.

A checkpoint is a Ray Train checkpoint directory (path or URI) holding DeepSpeed shards, a vidtx `.pt`
file (`vidtx.models.save_checkpoint`), or a registered model (`models:/<name>@<alias>` or
`models:/<name>/<version>`); `vidtx.train.checkpoint.load_trained_model` turns it into the module
(training's `model.init_from` reads its starting weights through it too).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlflow import MlflowClient

from vidtx.config import PipelineConfig
from vidtx.tracking.runs import BEST_CHECKPOINT_TAG, CHECKPOINT_TAG, connect, find_run, resolve_tracking_uri
from vidtx.train.checkpoint import load_trained_model, trained_model

__all__ = ["TrainedRun", "find_trained_run", "load_trained_model", "trained_model"]  # the one resolver


@dataclass
class TrainedRun:
    """Where a training run's weights are and which MLflow run records it."""

    checkpoint: str
    mlflow_run_id: str | None
    experiment_id: str | None
    client: MlflowClient
    setting: str = "the checkpoint"  # what named it, for one-line errors (`checkpoint_setting`)


def checkpoint_setting(config: PipelineConfig, checkpoint: str | None) -> str:
    """What named the checkpoint a stage uses, for its one-line errors: the argument, `eval.checkpoint`,
    or the training run's best checkpoint."""
    if checkpoint:
        return "--checkpoint"
    return (
        "eval.checkpoint"
        if config.eval.checkpoint
        else f"the checkpoint of train.run_name {config.train.run_name}"
    )


def find_trained_run(config: PipelineConfig, checkpoint: str | None = None) -> TrainedRun:
    """The checkpoint to use (argument > `eval.checkpoint` > the best checkpoint of `train.run_name`)
    and the MLflow run of `train.run_name`, when there is one."""
    client = connect(resolve_tracking_uri(config))
    run = (
        find_run(client, config.tracking.experiment, config.train.run_name) if config.train.run_name else None
    )
    tags = run.data.tags if run else {}
    chosen = checkpoint or config.eval.checkpoint or tags.get(BEST_CHECKPOINT_TAG) or tags.get(CHECKPOINT_TAG)
    if not chosen:
        raise ValueError(
            "no checkpoint to evaluate: pass one, set eval.checkpoint, or set train.run_name to a finished "
            f"training run in experiment '{config.tracking.experiment}'"
        )
    if run is None:
        return TrainedRun(chosen, None, None, client, checkpoint_setting(config, checkpoint))
    return TrainedRun(
        chosen, run.info.run_id, run.info.experiment_id, client, checkpoint_setting(config, checkpoint)
    )
