"""Masked-autoencoder pretraining end to end (the `pretrain-model` flow over `vidtx.stages.pretrain`):
Ray Train + DeepSpeed on the session's local Ray, continuing a VideoMAE pretraining as downloaded (a
Hugging Face folder, its decoder too), the MLflow run's curves and reconstruction images, the encoder
(its decoder dropped) registered and served as a feature extractor, and a fine-tune that starts from
it through the registry by VideoMAE's recipe."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch
from mlflow import MlflowClient
from training_runs import history, run_config
from transformers import VideoMAEForPreTraining
from videomae_folders import videomae_pretraining_folder

from flows.forms import PretrainForm
from flows.pretrain import pretrain_model
from vidtx.config import PipelineConfig, SweepConfig, dump_config
from vidtx.model_factory import model_for
from vidtx.serving.encoder import VideoEncoder
from vidtx.stages.predict import load_for_prediction
from vidtx.stages.sweep import run_sweep
from vidtx.stages.train import train
from vidtx.tracking.lineage import INIT_FROM_TAG, OBJECTIVE_TAG
from vidtx.tracking.model_registry import RegisteredModelNotFoundError, load_registered_model
from vidtx.tracking.sweeps import SWEEP_TAG
from vidtx.train.checkpoint import trained_model
from vidtx.train.starting_weights import start_from

pytestmark = pytest.mark.slow


def test_a_pretraining_continued_from_a_hugging_face_folder_logs_its_reconstructions_and_a_fine_tune_starts_from_it(
    tiny_dataset: PipelineConfig,
    unlabeled_shards: Path,
    tmp_path: Path,
    write_mp4: Callable[..., Path],
    prefect_api: None,
) -> None:
    """VideoMAE's pretraining as Hugging Face downloads it (`videomae_pretraining_folder`), continued by
    the flow on the videos without their labels, its encoder registered, fine-tuned through the
    registry on the labelled shards of the same."""
    downloaded = videomae_pretraining_folder(tmp_path / "videomae-base")
    config = run_config(tiny_dataset, tmp_path, max_steps=6, checkpoint_every=3, val_every=3, log_every=1)
    config.data.shards = unlabeled_shards
    config.model.name = "videomae_tiny"
    config.model.init_from = str(downloaded)
    config.pretrain = config.pretrain.model_copy(
        update={
            "mask_ratio": 0.75,
            "decoder_depth": 1,
            "decoder_width": 32,
            "decoder_heads": 2,
            "image_every": 3,
        }
    )
    config_file = tmp_path / "pretrain.yaml"
    config_file.write_text(dump_config(config))
    pretrained_run = pretrain_model(PretrainForm(config=config_file, training_run="pretraining"))
    result = pretrained_run.training
    assert result.run_name == "pretraining"
    client = MlflowClient(result.tracking_uri)
    started = Path(
        client.download_artifacts(result.mlflow_run_id, "init_from.txt", str(tmp_path))
    ).read_text()
    assert started.startswith(f"found {downloaded}: Hugging Face's VideoMAEForPreTraining")
    # the encoder whole, its final norm too, but the classifier (which a pretraining does not train)
    assert "kept as initialised (2):\n  head.fc.weight\n  head.fc.bias\n" in started
    assert "decoder loaded (19):\n  decoder_blocks.0.attn.proj.bias" in started  # all of it
    # 6 small steps (AdamW, lr 0.002) from there: within 0.02 of the downloaded weights, where any
    # other start differs by the weights' own size
    theirs = VideoMAEForPreTraining.from_pretrained(downloaded)
    pretrained_encoder = trained_model(config, result.best_checkpoint)
    assert (
        pretrained_encoder.module.blocks[0].mlp.fc1.weight
        - theirs.videomae.encoder.layer[0].intermediate.dense.weight
    ).abs().max() < 0.02
    assert (pretrained_encoder.decoder["decoder_pred.weight"] - theirs.decoder.head.weight).abs().max() < 0.02

    run = client.get_run(result.mlflow_run_id)
    assert run.data.tags[OBJECTIVE_TAG] == "masked_autoencoding"
    assert sorted(history(result, "train/loss")) == list(range(1, 7))
    assert sorted(history(result, "val/loss")) == [3, 6]  # the reconstruction loss of the val split
    assert "val/top1" not in run.data.metrics
    images = {artifact.path for artifact in client.list_artifacts(run.info.run_id, "reconstructions")}
    assert images == {"reconstructions/step-00000003.png", "reconstructions/step-00000006.png"}
    assert result.metrics["val_loss"] > 0

    # The checkpoint's encoder: VideoMAE's ViT the config names, decoder apart, read back whatever
    # the fine-tune's classes; a fine-tune loads every tensor of it but its classifier and final norm
    # (VideoMAE's recipe: mean pooling into a new fc_norm).
    encoder = pretrained_encoder.module
    assert not [name for name in encoder.state_dict() if "decoder" in name or "mask_token" in name]
    fine_tune = config.model_copy(deep=True)
    fine_tune.data.shards = tiny_dataset.data.shards  # labelled
    fine_tune.model.init_from = result.best_checkpoint
    model = model_for(fine_tune)
    report = start_from(model, trained_model(fine_tune, result.best_checkpoint), ["a", "b", "c", "d"], "here")
    assert sorted(report.initialised) == ["fc_norm.bias", "fc_norm.weight", "head.fc.bias", "head.fc.weight"]
    pretrained = encoder.state_dict()
    assert all(torch.equal(model.state_dict()[name], pretrained[name]) for name in report.loaded)
    assert len(report.loaded) == len(pretrained) - 4  # its classifier and final norm

    # The best checkpoint's encoder is registered in the pretraining's run, with its alias and lineage
    version = pretrained_run.encoder
    assert pretrained_run.init_from == "models:/vidtx-encoder@pretrained"
    assert version.aliases == ["pretrained"]
    assert version.run_id == result.mlflow_run_id
    registered = client.get_model_version("vidtx-encoder", version.version)
    assert registered.run_id == result.mlflow_run_id
    assert registered.tags[OBJECTIVE_TAG] == "masked_autoencoding"
    assert registered.tags["vidtx.manifest_hash"] == run.data.tags["vidtx.manifest_hash"]
    served = load_registered_model(pretrained_run.init_from, result.tracking_uri)
    assert isinstance(served, VideoEncoder)
    assert served.class_names is None
    assert all(torch.equal(tensor, pretrained[name]) for name, tensor in served.module.state_dict().items())
    # ... served, it answers one embedding per video (a row with the error for one it cannot read)
    video = write_mp4(tmp_path / "clip.mp4", num_frames=16).read_bytes()
    answer = served.predict(None, pd.DataFrame({"video": [video, b"not a video"]}), {"num_clips": 2})
    assert list(answer.columns) == ["embedding", "error"]
    assert len(answer.embedding[0]) == served.module.embed_dim
    assert answer.error[0] is None
    assert answer.embedding[1] == []
    assert answer.error[1]
    # ... and `vidtx predict` refuses it in one line: it has no classes
    with pytest.raises(RegisteredModelNotFoundError, match="is a pretrained encoder, not a classifier"):
        load_for_prediction(pretrained_run.init_from, result.tracking_uri)

    # A fine-tune through the registry trains from there through Ray (the report logged with the
    # run, the version it started from in its lineage)
    fine_tune.model.init_from = pretrained_run.init_from
    fine_tune.train = fine_tune.train.model_copy(update={"max_steps": 2, "checkpoint_every": 2})
    tuned = train(fine_tune, run_name="fine-tune")
    assert client.get_run(tuned.mlflow_run_id).data.tags[INIT_FROM_TAG] == version.model_uri
    logged = client.download_artifacts(tuned.mlflow_run_id, "init_from.txt", str(tmp_path))
    text = Path(logged).read_text()
    assert "initialised from models:/vidtx-encoder@pretrained" in text
    assert (
        "kept as initialised (4):\n  fc_norm.weight\n  fc_norm.bias\n  head.fc.weight\n  head.fc.bias" in text
    )
    assert "VideoMAE's fine-tuning recipe, mean pooling into a new fc_norm" in text


def test_a_pretraining_sweep_compares_reconstruction_losses_and_registers_the_best_encoder(
    tiny_dataset: PipelineConfig, unlabeled_shards: Path, tmp_path: Path
) -> None:
    """`sweep.objective: masked_autoencoding`: every trial pretrains (on unlabeled shards), trials are
    compared by their validation reconstruction loss, and the best one's encoder is registered."""
    config = run_config(tiny_dataset, tmp_path, max_steps=2, checkpoint_every=2, val_every=2)
    config.train.cpus_per_worker = 0.49  # two trials of two workers (and their drivers) in 2 CPUs
    config.train.precision = "fp32"
    config.data.shards = unlabeled_shards
    config.data.num_workers = 0
    config.model.name = "joint_tiny"
    config.pretrain = config.pretrain.model_copy(
        update={"decoder_depth": 1, "decoder_width": 32, "decoder_heads": 2, "model_name": "swept-encoder"}
    )
    config.sweep = SweepConfig.model_validate(
        {
            "name": "mask-sweep",
            "objective": "masked_autoencoding",
            "space": {"pretrain.mask_ratio": {"grid": [0.5, 0.75]}},
            "num_trials": 1,
            "max_concurrent": 2,
            "metric": "val_loss",
            "mode": "min",
            "scheduler": {"name": "none"},
        }
    )
    result = run_sweep(config)

    assert [row.state for row in result.trials] == ["finished", "finished"]
    assert result.best == min(result.trials, key=lambda row: row.metric)
    client = MlflowClient(f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    for row in result.trials:
        run = client.get_run(row.mlflow_run_id)
        assert run.data.tags[OBJECTIVE_TAG] == "masked_autoencoding"
        assert run.data.tags[SWEEP_TAG] == "mask-sweep"
        assert float(run.data.params["pretrain.mask_ratio"]) == row.values["pretrain.mask_ratio"]
        assert "val/top1" not in run.data.metrics
    assert result.evaluation == {}
    assert result.version.name == "swept-encoder"
    assert result.version.aliases == ["pretrained"]
    assert result.version.run_id == result.best.mlflow_run_id
    served = load_registered_model("models:/swept-encoder@pretrained", str(client.tracking_uri))
    assert isinstance(served, VideoEncoder)
    assert served.config.pretrain.mask_ratio == result.best.values["pretrain.mask_ratio"]
    assert "the best trial's encoder registered" in result.summary()
