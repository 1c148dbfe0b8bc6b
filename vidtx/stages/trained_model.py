"""From what names a trained model to the model: the one place checkpoints become modules.

A checkpoint is a Ray Train checkpoint directory (path or URI) holding DeepSpeed shards, a vidtx `.pt`
file (`vidtx.models.save_checkpoint`), or a registered model (`models:/<name>@<alias>` or
`models:/<name>/<version>`). Without one, the best checkpoint of the training run named by
`train.run_name` is used, found through its MLflow run.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray.train
from mlflow import MlflowClient
from torch import nn

from vidtx.config import PipelineConfig
from vidtx.model_factory import model_for
from vidtx.models import load_checkpoint
from vidtx.tracking.model_registry import load_registered_model
from vidtx.tracking.runs import BEST_CHECKPOINT_TAG, CHECKPOINT_TAG, connect, find_run, resolve_tracking_uri
from vidtx.train.checkpoint import consolidated_state_dict


@dataclass
class TrainedRun:
    """Where a training run's weights are and which MLflow run records it."""

    checkpoint: str
    mlflow_run_id: str | None
    experiment_id: str | None
    client: MlflowClient


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
        return TrainedRun(chosen, None, None, client)
    return TrainedRun(chosen, run.info.run_id, run.info.experiment_id, client)


def load_trained_model(config: PipelineConfig, checkpoint: str) -> nn.Module:
    """The model of `checkpoint`, in eval mode. A Ray checkpoint is read into the architecture that
    `config` trains; a `.pt` file and a registered model carry their own."""
    if checkpoint.startswith("models:/"):
        return load_registered_model(checkpoint, resolve_tracking_uri(config)).module.eval()
    if checkpoint.endswith(".pt"):
        return load_checkpoint(checkpoint).eval()
    model = model_for(config)
    with ray.train.Checkpoint(checkpoint).as_directory() as directory:
        model.load_state_dict(consolidated_state_dict(directory, model))
    return model.eval()
