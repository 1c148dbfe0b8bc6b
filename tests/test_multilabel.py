"""Multi-label classification (`model.task: multi_label`): the served classifier's label sets and
threshold; end to end (slow), generated two-object videos sharded with label sets, trained on Ray with
a sigmoid per class, evaluated by mAP (equal to scikit-learn's on the served model's scores),
registered on its mAP floor, and predicted with every class above the threshold."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from mlflow import MlflowClient
from sklearn.metrics import average_precision_score
from training_runs import history, run_config

from vidtx.config import ConfigError, PipelineConfig, SynthConfig, load_config
from vidtx.model_factory import model_for
from vidtx.serving.classifier import VideoClassifier
from vidtx.stages.evaluate import evaluate_trained
from vidtx.stages.predict import predict_videos
from vidtx.stages.register import register_trained
from vidtx.stages.shard import shard_dataset
from vidtx.stages.train import train
from vidtx.stages.trained_model import find_trained_run, load_trained_model

CLASSES = ["growing", "moving_down", "moving_right", "shrinking"]


def classifier(task: str, threshold: float = 0.5, aggregation: str = "mean") -> VideoClassifier:
    """An untrained tiny X-ViT served as a classifier of `CLASSES` (random weights: the scores are
    what they are; the rows must follow them)."""
    config = load_config(
        None,
        [
            f"model.task={task}",
            "data.num_frames=4",
            "data.crop_size=32",
            "data.short_side=32",
            f"eval.threshold={threshold}",
            f"eval.view_aggregation={aggregation}",
        ],
    )
    torch.manual_seed(0)
    return VideoClassifier.of(model_for(config, num_classes=len(CLASSES)), config, CLASSES)


def test_a_multi_label_model_returns_every_class_at_or_above_its_threshold(
    tmp_path: Path, write_mp4: Callable[..., Path]
) -> None:
    video = str(write_mp4(tmp_path / "v.mp4", num_frames=12, width=48, height=32))
    served = classifier("multi_label")
    views = served.views(video, 1, 3)
    logits = served.view_logits(video, 1, 3)  # (3 views, K)
    for aggregation, combine in (("mean", torch.mean), ("max", torch.amax)):
        served.config.eval.view_aggregation = aggregation
        probabilities, _ = served.scores(views)
        assert torch.allclose(probabilities, combine(logits.sigmoid(), dim=0), atol=1e-6)
    ranked = sorted(zip(probabilities.tolist(), CLASSES, strict=True), reverse=True)
    middle = (ranked[1][0] + ranked[2][0]) / 2  # between the second and third class
    for threshold, expected in ((0.0, 4), (middle, 2), (1.0, 0)):
        (row,) = served.predict(None, pd.DataFrame({"video": [video]}), {"threshold": threshold}).itertuples()
        assert row.labels == [name for _, name in ranked[:expected]]
        assert row.label_scores == pytest.approx([score for score, _ in ranked[:expected]])
        assert row.top_k_labels == [name for _, name in ranked]  # the ranking is there whatever the threshold
    default = served.predict(None, pd.DataFrame({"video": [video]}))  # eval.threshold
    assert default.labels[0] == [name for score, name in ranked if score >= 0.5]
    with pytest.raises(ValueError, match=r"^threshold 1.5 is outside \[0, 1\]"):
        served.predict(None, pd.DataFrame({"video": [video]}), {"threshold": 1.5})


def test_a_single_label_model_has_no_label_sets_and_keeps_its_softmax(
    tmp_path: Path, write_mp4: Callable[..., Path]
) -> None:
    video = str(write_mp4(tmp_path / "v.mp4", num_frames=12, width=48, height=32))
    served = classifier("single_label")
    (row,) = served.predict(None, pd.DataFrame({"video": [video]})).itertuples()
    assert (row.labels, row.label_scores) == (None, None)
    assert sum(row.top_k_scores) == pytest.approx(1.0)  # every class's softmax probability
    assert "threshold" not in served.default_params()


def test_the_losses_of_single_label_models_are_refused_for_multi_label_ones() -> None:
    for setting in ("train.loss=focal", "train.class_weights=balanced"):
        field = setting.split("=")[0]
        with pytest.raises(
            ValueError, match=rf"{field}: \w+ is for single-label models; model.task is multi_label"
        ):
            load_config(None, ["model.task=multi_label", setting])
    assert load_config(None, ["model.task=multi_label"]).promotion_metric == "mean_ap"
    assert PipelineConfig().promotion_metric == "top1"


@pytest.mark.slow
def test_multi_label_videos_train_evaluate_by_map_register_on_its_floor_and_predict_label_sets(
    tiny_dataset: PipelineConfig, tmp_path: Path
) -> None:
    """Two-object videos (two motion classes each) sharded with label sets, a sigmoid per class
    trained by Ray Train, validated and evaluated by mAP; the evaluation's mAP is scikit-learn's on
    the served model's scores of the same test videos; registered by the mAP floor; predicted with
    the classes above the threshold."""
    config = run_config(tiny_dataset, tmp_path, max_steps=8, checkpoint_every=4, val_every=4, log_every=1)
    config.shard = config.shard.model_copy(
        update={
            "source": tmp_path / "videos" / "annotations.csv",
            "label_separator": "|",
            "output": tmp_path / "shards",
            "processes": 1,
        }
    )
    config.synth = SynthConfig(
        output=tmp_path / "videos",
        videos_per_class={"train": 4, "val": 1, "test": 2},  # of each of the 8 motion classes
        num_frames=8,
        size=32,
        objects_per_video=2,
    )
    config.data.shards = tmp_path / "shards"
    config.model.task = "multi_label"
    config.eval = config.eval.model_copy(update={"split": "test", "num_crops": 1, "threshold": 0.4})
    config.registry.model_name = "multilabel-test"
    manifests = shard_dataset(config.shard, config.synth).manifests
    assert all(manifest.multi_label for manifest in manifests.values())

    single_label = config.model_copy(deep=True)
    single_label.model.task = "single_label"
    with pytest.raises(ConfigError, match=r"^model.task single_label: the training data .* holds label sets"):
        train(single_label, run_name="single-label")  # one line on the driver, before any Ray worker

    result = train(config, run_name="multilabel")
    # its registry too: MlflowClient's default registry is whatever an earlier test's process set
    client = MlflowClient(result.tracking_uri, registry_uri=result.tracking_uri)
    logged = client.get_run(result.mlflow_run_id).data.metrics
    assert sorted(history(result, "val/mean_ap")) == [4, 8]
    assert "val/loss" in logged
    assert "val/top1" not in logged

    config = config.for_run("multilabel")
    trained = find_trained_run(config)
    evaluation = evaluate_trained(config, trained)
    assert evaluation.multilabel
    assert set(evaluation.by_ensemble) == {"mean", "max"}
    assert evaluation.primary == "mean"
    assert set(evaluation.metrics()) >= {"mean_ap", "micro_f1", "macro_f1", "max/mean_ap", "loss"}
    test_manifest = manifests["test"]
    assert evaluation.num_videos == test_manifest.num_samples

    # the evaluation's mAP is scikit-learn's on the served model's scores of the same videos
    served = VideoClassifier.of(
        load_trained_model(config, trained.checkpoint), config, evaluation.class_names
    )
    annotations = pd.read_csv(config.shard.source)
    test_rows = annotations[annotations["split"] == "test"]
    videos = [str(config.synth.output / path) for path in test_rows["path"]]
    scores = served.predict(None, pd.DataFrame({"video": videos}), {"top_k": len(evaluation.class_names)})
    probabilities = np.array(
        [
            [
                dict(zip(row.top_k_labels, row.top_k_scores, strict=True))[name]
                for name in evaluation.class_names
            ]
            for row in scores.itertuples()
        ]
    )
    truth = np.array(
        [[name in labels.split("|") for name in evaluation.class_names] for labels in test_rows["label"]]
    )
    present = truth.any(axis=0)
    expected = average_precision_score(truth[:, present], probabilities[:, present], average="macro")
    assert evaluation.metrics()["mean_ap"] == pytest.approx(expected, abs=1e-6)

    version = register_trained(config, trained, evaluation)
    metrics = evaluation.by_ensemble["mean"]
    chance = np.mean([count / metrics.num_videos for count in metrics.support if count])
    mean_ap = evaluation.metrics()["mean_ap"]
    registered = client.get_model_version("multilabel-test", version.version)
    assert float(registered.tags["vidtx.metric.mean_ap"]) == pytest.approx(mean_ap)
    if mean_ap > chance:
        assert sorted(version.aliases) == ["challenger", "champion"]
    else:
        assert version.aliases == []
        assert version.reason.startswith(f"not better than chance: mean_ap {mean_ap:.4f} <= {chance:.4f}")

    config.predict = config.predict.model_copy(
        update={"output": tmp_path / "predictions.parquet", "threshold": 0.3}
    )
    summary = predict_videos(served, version.model_uri, videos)
    assert summary.failed == 0
    table = pd.read_parquet(tmp_path / "predictions.parquet")
    for row in table.itertuples():
        above = [
            (name, score)
            for name, score in zip(row.top_k_labels, row.top_k_scores, strict=True)
            if score >= 0.3
        ]
        assert list(row.labels) == [name for name, _ in above]
        assert list(row.label_scores) == pytest.approx([score for _, score in above])
