"""Registering models in MLflow: versions, champion/challenger aliases, loading back by alias."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import torch
from mlflow import MlflowClient

from vidtx.eval.multiview import evaluate
from vidtx.manifest import load_manifest
from vidtx.models import save_checkpoint
from vidtx.results import EvalResult
from vidtx.serving.classifier import VideoClassifier
from vidtx.stages.trained_model import load_trained_model
from vidtx.tracking.model_registry import load_registered_model, register
from vidtx.tracking.runs import mlflow_uris

pytestmark = pytest.mark.slow


def constant_predictor(model: torch.nn.Module) -> torch.nn.Module:
    """The same network with a head that always answers class 0: a strictly worse model."""
    worse = copy.deepcopy(model)
    head = worse.head.fc if hasattr(worse.head, "fc") else worse.head
    final = [module for module in head.modules() if isinstance(module, torch.nn.Linear)][-1]
    with torch.no_grad():
        final.weight.zero_()
        final.bias.copy_(torch.nn.functional.one_hot(torch.tensor(0), final.bias.numel()).float())
    return worse


def evaluation_of(model: torch.nn.Module, config, checkpoint: Path) -> EvalResult:
    """Evaluate `model` after a round trip through a vidtx `.pt` file."""
    path = checkpoint / "model.pt"
    save_checkpoint(model, path)
    loaded = load_trained_model(config, str(path))
    return evaluate(loaded, load_manifest(config.data.shards, config.eval.split), config.data, config.eval)


def test_aliases_follow_the_metric(trained_run: tuple, synthetic_shards: tuple, tmp_path: Path) -> None:
    config, result = trained_run
    config = config.model_copy(deep=True)
    config.eval.split, config.eval.num_crops = "train", 1  # the memorised split: trained >> constant
    config.registry.model_name = "aliases-test"
    client = MlflowClient(result.tracking_uri, registry_uri=result.tracking_uri)
    trained = load_trained_model(config, result.checkpoint)
    worse = constant_predictor(trained)
    trained_eval = evaluation_of(trained, config, tmp_path / "a")
    worse_eval = evaluation_of(worse, config, tmp_path / "b")
    assert worse_eval.metrics()["top1"] == pytest.approx(0.25)  # balanced 4-class split
    assert trained_eval.metrics()["top1"] > 0.25

    mlflow_environment = {name: value for name, value in os.environ.items() if name.startswith("MLFLOW_")}
    training = client.get_run(result.mlflow_run_id).info
    # a model at chance is registered, but is no challenger (nor, as the first version, champion)
    at_chance = register(worse, config, worse_eval, client=client, run_id=result.mlflow_run_id)
    assert (at_chance.version, at_chance.promoted, at_chance.aliases) == ("1", False, [])
    assert at_chance.reason.startswith("not better than chance: top1 0.2500 <= 0.2500 (4 classes)")
    assert client.get_model_version("aliases-test", "1").aliases == []
    # no MLFLOW_TRACKING_URI left behind to send later runs of this process to this store
    assert {
        name: value for name, value in os.environ.items() if name.startswith("MLFLOW_")
    } == mlflow_environment

    better = register(trained, config, trained_eval, client=client, run_id=result.mlflow_run_id)
    assert (better.version, better.promoted) == ("2", True)
    assert set(better.aliases) == {"champion", "challenger"}
    assert str(client.get_model_version_by_alias("aliases-test", "champion").version) == "2"

    config.registry.min_top1 = 0.0  # an explicit floor below chance lets the constant model through
    again_worse = register(worse, config, worse_eval, client=client, run_id=result.mlflow_run_id)
    assert (again_worse.version, again_worse.promoted) == ("3", False)
    assert "does not beat" in again_worse.reason
    assert str(client.get_model_version_by_alias("aliases-test", "champion").version) == "2"
    assert str(client.get_model_version_by_alias("aliases-test", "challenger").version) == "3"

    # a metric measured on another split is not comparable: no promotion whatever its value
    config.eval.split = "val"
    other_split = evaluation_of(trained, config, tmp_path / "c")
    incomparable = register(trained, config, other_split, client=client, run_id=result.mlflow_run_id)
    assert not incomparable.promoted
    assert "not comparable" in incomparable.reason

    # logging models into the training's run leaves how and when it ended as they were
    after = client.get_run(result.mlflow_run_id).info
    assert (after.status, after.end_time) == (training.status, training.end_time)

    version = client.get_model_version("aliases-test", "2")
    assert "vidtx.metric.top1" in version.tags
    assert "GFLOPs per view" in version.description  # the model card
    # the registry's pages show the description as raw text: a sentence first, no heading, no code marks
    assert version.description.startswith("Video classifier xvit_tiny")
    assert "`" not in version.description
    # and as written: one line per paragraph, no line break inside a sentence (list and table rows apart)
    broken = [
        line
        for line in version.description.splitlines()
        if line and not line.startswith(("- ", "|")) and not line.endswith((".", ":"))
    ]
    assert broken == []
    logged_model_id = version.source.removeprefix("models:/")  # the store leaves version.model_id empty
    assert client.get_logged_model(logged_model_id).name == "aliases-test"  # not "model"
    with mlflow_uris(result.tracking_uri):
        logged = Path(
            mlflow.artifacts.download_artifacts("models:/aliases-test/2", dst_path=str(tmp_path / "v2"))
        )
    assert (
        logged.joinpath("artifacts", "MODEL_CARD.md")
        .read_text()
        .startswith("# aliases-test\n\nVideo classifier")
    )

    loaded = load_registered_model("models:/aliases-test@champion", tracking_uri=result.tracking_uri)
    assert loaded.class_names == trained_eval.class_names
    assert loaded.config.model.name == config.model.name
    clips = torch.randn(3, 3, config.data.num_frames, config.data.crop_size, config.data.crop_size)
    with torch.no_grad():
        assert torch.allclose(loaded.module(clips), trained(clips), atol=1e-5)

    # predicting from MP4 files: the registered model and the in-memory one agree
    videos = sorted((synthetic_shards[0] / "val").rglob("*.mp4"))[:3]
    in_memory = VideoClassifier.of(trained, config, trained_eval.class_names)
    views = {"top_k": 2, "num_clips": 1, "num_crops": 3}
    from_registry = [loaded.classify(str(video), **views) for video in videos]
    for registered, local in zip(
        from_registry, [in_memory.classify(str(v), **views) for v in videos], strict=True
    ):
        assert registered.top_k_labels == local.top_k_labels
        assert registered.top_k_scores == pytest.approx(local.top_k_scores, abs=1e-5)
        assert registered.top_k_scores[0] >= registered.top_k_scores[1]

    cli = subprocess.run(
        [sys.executable, "-m", "vidtx", "predict", str(videos[0]), "--model", "models:/aliases-test@champion",
         "--tracking-uri", result.tracking_uri, "--top-k", "2"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.strip().splitlines()
    assert lines[0] == str(videos[0])
    assert lines[1].split()[-1] == from_registry[0].label
