"""The pretraining stage: `pretrain(config) -> TrainResult`, the network of `model` learned as the
encoder of a masked autoencoder (VideoMAE; `config.pretrain`) from the clips of `data`, labels ignored.

It is the training stage with another objective (`vidtx.train.objectives.MaskedAutoencoding`): the
same Ray Train + DeepSpeed machinery, checkpoints and resume, precision, activation checkpointing,
compilation, weight average and MLflow run (the loss curve, throughput, the validation split's
reconstruction loss, and an image of a clip's frames: original, masked, reconstructed). Each
checkpoint records the config it pretrained, so `model.init_from` reads the encoder back from it
(its decoder dropped) whatever the fine-tune's frames and crop size.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from vidtx.config import PipelineConfig
from vidtx.stages.train import train
from vidtx.train.payload import TrainResult
from vidtx.train.progress import ProgressCallback


def default_pretrain_name(config: PipelineConfig) -> str:
    return f"{config.name}-pretrain-{datetime.datetime.now():%Y%m%d-%H%M%S}"


def pretrain(
    config: PipelineConfig,
    *,
    tags: Mapping[str, str] | None = None,
    progress: ProgressCallback | None = None,
) -> TrainResult:
    """Pretrain `config`'s network; the same `train.run_name` + storage path resumes an earlier run."""
    run_name = config.train.run_name or default_pretrain_name(config)
    return train(config, run_name=run_name, tags=tags, progress=progress, objective="masked_autoencoding")
