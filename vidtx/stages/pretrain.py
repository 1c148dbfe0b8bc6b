"""The pretraining stage: `pretrain(config) -> PretrainResult`, the network of `model` learned as the
encoder of a masked autoencoder (VideoMAE; `config.pretrain`) from the clips of `data`, labels ignored,
then registered.

It is the training stage with another objective (`vidtx.train.objectives.MaskedAutoencoding`): the
same Ray Train + DeepSpeed machinery, checkpoints and resume, precision, activation checkpointing,
compilation, weight average and MLflow run (the loss curve, throughput, the validation split's
reconstruction loss, and an image of a clip's frames: original, masked, reconstructed). Each
checkpoint records the config it pretrained, so `model.init_from` reads the encoder back from it
(its decoder dropped) whatever the fine-tune's frames and crop size. The best checkpoint's encoder
(the lowest validation reconstruction loss; without a validation split, the latest) is registered as
`pretrain.model_name` with alias `pretrain.alias`: `models:/<name>@<alias>` starts a fine-tune.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from pydantic import BaseModel

from vidtx.config import PipelineConfig
from vidtx.results import ModelVersionInfo
from vidtx.stages.train import train
from vidtx.stages.trained_model import TrainedRun, find_trained_run, trained_model
from vidtx.tracking.model_registry import register_encoder
from vidtx.train.payload import TrainResult
from vidtx.train.progress import ProgressCallback


class PretrainResult(BaseModel):
    """A pretraining's run and its registered encoder (`vidtx pretrain` prints it)."""

    training: TrainResult
    encoder: ModelVersionInfo
    init_from: str  # what a fine-tune's model.init_from names: models:/<name>@<alias>

    def summary(self) -> str:
        return "\n".join(
            [
                self.training.summary(),
                f"encoder:     {self.encoder.summary()}",
                f"fine-tune:   --set model.init_from={self.init_from}",
            ]
        )


def default_pretrain_name(config: PipelineConfig) -> str:
    return f"{config.name}-pretrain-{datetime.datetime.now():%Y%m%d-%H%M%S}"


def pretrain(
    config: PipelineConfig,
    *,
    tags: Mapping[str, str] | None = None,
    progress: ProgressCallback | None = None,
) -> PretrainResult:
    """Pretrain `config`'s network and register its encoder; the same `train.run_name` + storage path
    resumes an earlier run."""
    run_name = config.train.run_name or default_pretrain_name(config)
    training = train(config, run_name=run_name, tags=tags, progress=progress, objective="masked_autoencoding")
    encoder = register_pretrained(config.for_run(run_name), find_trained_run(config.for_run(run_name)))
    return PretrainResult(
        training=training, encoder=encoder, init_from=f"models:/{encoder.name}@{config.pretrain.alias}"
    )


def register_pretrained(config: PipelineConfig, trained: TrainedRun) -> ModelVersionInfo:
    """Register the encoder of a pretraining's checkpoint (`find_trained_run`: its best, else its
    latest) in its MLflow run."""
    if trained.mlflow_run_id is None:
        raise ValueError("registering an encoder needs the pretraining's MLflow run: set train.run_name")
    encoder = trained_model(config, trained.checkpoint).module
    return register_encoder(encoder, config, client=trained.client, run_id=trained.mlflow_run_id)
