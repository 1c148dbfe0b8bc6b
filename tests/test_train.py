"""Ray Train + DeepSpeed on CPU: real Ray (local), real DeepSpeed engines (gloo), real MLflow (SQLite)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from vidtx.config import PipelineConfig
from vidtx.eval.evaluate import load_trained_model, predict_split
from vidtx.tracking.metrics import STEP_METRIC
from vidtx.tracking.runs import RUN_NAME_TAG
from vidtx.train.launcher import TrainResult, train

pytestmark = pytest.mark.slow


def run_config(dataset: PipelineConfig, tmp_path: Path, **train: object) -> PipelineConfig:
    config = dataset.model_copy(deep=True)
    config.workdir = tmp_path
    config.train = config.train.model_copy(update={"storage_path": str(tmp_path / "ray"), **train})
    return config


def history(result: TrainResult, metric: str) -> dict[int, float]:
    client = MlflowClient(result.tracking_uri)
    return {point.step: point.value for point in client.get_metric_history(result.mlflow_run_id, metric)}


def test_two_workers_zero2_bf16_loss_goes_down(tiny_dataset: PipelineConfig, tmp_path: Path) -> None:
    config = run_config(
        tiny_dataset,
        tmp_path,
        zero_stage=2,
        precision="bf16",
        max_steps=100,
        log_every=1,
        checkpoint_every=100,
    )
    config.train.optimizer.lr = 0.003
    result = train(config, run_name="loss-down")
    losses = list(history(result, STEP_METRIC).values())
    assert len(losses) == 100
    chance = math.log(4)  # the loss of a uniform guess over the 4 classes, where training starts
    assert losses[0] == pytest.approx(chance, rel=0.15)
    assert sum(losses[-10:]) / 10 < 0.85 * chance
    assert result.metrics["step"] == 100
    assert Path(result.checkpoint, "state").is_dir()
    client = MlflowClient(result.tracking_uri)
    runs = client.search_runs([client.get_run(result.mlflow_run_id).info.experiment_id])
    assert [run.info.run_id for run in runs] == [result.mlflow_run_id]  # one run, not one per worker
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags[RUN_NAME_TAG] == "loss-down"
    assert run.data.tags["vidtx.manifest_hash"]
    assert run.data.params["train.zero_stage"] == "2"
    for metric in ("train/lr", "train/clips_per_second", "train/samples_seen", "train/grad_norm", "val/top1"):
        assert metric in run.data.metrics


@pytest.mark.parametrize(("stage", "precision"), [(0, "bf16"), (1, "fp32"), (3, "bf16")])
def test_zero_stages_and_precisions_run(
    tiny_dataset: PipelineConfig, tmp_path: Path, stage: int, precision: str
) -> None:
    config = run_config(
        tiny_dataset, tmp_path, zero_stage=stage, precision=precision, max_steps=3, checkpoint_every=3
    )
    result = train(config, run_name=f"z{stage}-{precision}")
    assert result.metrics["step"] == 3
    assert 0.0 <= result.metrics["val_top1"] <= 1.0
    if precision == "fp32":
        # The consolidated fp32 state dict, in a fresh model, reproduces the engine's validation loss.
        model = load_trained_model(config, result.checkpoint)
        outputs = predict_split(
            model, config.data, config.data.val_split, num_clips=1, num_crops=1, batch_size=4
        )
        loss = torch.nn.functional.cross_entropy(outputs.logits[:, 0], outputs.labels).item()
        assert loss == pytest.approx(result.metrics["val_loss"], rel=1e-4)


def test_restarted_run_continues_from_its_checkpoint(tiny_dataset: PipelineConfig, tmp_path: Path) -> None:
    config = run_config(
        tiny_dataset, tmp_path, max_steps=4, log_every=1, checkpoint_every=2, precision="fp32"
    )
    config.data.num_workers = 1  # decode in a DataLoader worker process (forkserver) inside each Ray worker
    first = train(config, run_name="resume-me")
    assert first.metrics["step"] == 4
    config.train.max_steps = 6  # the same run, started again with a longer budget
    second = train(config, run_name="resume-me")
    assert second.mlflow_run_id == first.mlflow_run_id
    assert second.metrics["step"] == 6
    assert history(second, "train/resumed_from_step") == {4: 4.0}  # not reset to 0
    assert sorted(history(second, STEP_METRIC)) == [1, 2, 3, 4, 5, 6]
    assert history(second, "train/samples_seen")[6] == 6 * 2 * config.train.micro_batch_size
