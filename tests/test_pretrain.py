"""Masked-autoencoder pretraining end to end (`vidtx.stages.pretrain`): Ray Train + DeepSpeed on the
session's local Ray, the MLflow run's curves and reconstruction images, and a fine-tune that starts
from the checkpoint's encoder (its decoder dropped)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient
from training_runs import history, run_config

from vidtx.config import PipelineConfig
from vidtx.model_factory import model_for
from vidtx.stages.pretrain import pretrain
from vidtx.stages.train import train
from vidtx.tracking.lineage import OBJECTIVE_TAG
from vidtx.train.checkpoint import trained_model
from vidtx.train.starting_weights import start_from

pytestmark = pytest.mark.slow


def test_pretraining_on_unlabeled_videos_logs_its_reconstructions_and_a_fine_tune_starts_from_its_encoder(
    tiny_dataset: PipelineConfig, unlabeled_shards: Path, tmp_path: Path
) -> None:
    """Pretrained on the videos without their labels, fine-tuned on the labelled shards of the same."""
    config = run_config(tiny_dataset, tmp_path, max_steps=6, checkpoint_every=3, val_every=3, log_every=1)
    config.data.shards = unlabeled_shards
    config.model.name = "joint_tiny"
    config.pretrain = config.pretrain.model_copy(
        update={
            "mask_ratio": 0.75,
            "decoder_depth": 1,
            "decoder_width": 32,
            "decoder_heads": 2,
            "image_every": 3,
        }
    )
    result = pretrain(config)

    client = MlflowClient(result.tracking_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.data.tags[OBJECTIVE_TAG] == "masked_autoencoding"
    assert sorted(history(result, "train/loss")) == list(range(1, 7))
    assert sorted(history(result, "val/loss")) == [3, 6]  # the reconstruction loss of the val split
    assert "val/top1" not in run.data.metrics
    images = {artifact.path for artifact in client.list_artifacts(run.info.run_id, "reconstructions")}
    assert images == {"reconstructions/step-00000003.png", "reconstructions/step-00000006.png"}
    assert result.metrics["val_loss"] > 0

    # The checkpoint's encoder: the joint ViT the config names, decoder dropped, read back whatever
    # the fine-tune's classes; a fine-tune loads every tensor of it but its classifier.
    encoder = trained_model(config, result.best_checkpoint).module
    assert not [name for name in encoder.state_dict() if "decoder" in name or "mask_token" in name]
    fine_tune = config.model_copy(deep=True)
    fine_tune.data.shards = tiny_dataset.data.shards  # labelled
    fine_tune.model.init_from = result.best_checkpoint
    model = model_for(fine_tune)
    report = start_from(model, trained_model(fine_tune, result.best_checkpoint), ["a", "b", "c", "d"], "here")
    assert sorted(report.initialised) == ["head.fc.bias", "head.fc.weight"]
    pretrained = encoder.state_dict()
    assert all(torch.equal(model.state_dict()[name], pretrained[name]) for name in report.loaded)
    assert len(report.loaded) == len(pretrained) - 2

    # ... and trains from there through Ray (the report logged with the run)
    fine_tune.train = fine_tune.train.model_copy(update={"max_steps": 2, "checkpoint_every": 2})
    tuned = train(fine_tune, run_name="fine-tune")
    logged = client.download_artifacts(tuned.mlflow_run_id, "init_from.txt", str(tmp_path))
    text = Path(logged).read_text()
    assert f"initialised from {result.best_checkpoint}" in text
    assert "kept as initialised (2):\n  head.fc.weight\n  head.fc.bias" in text
