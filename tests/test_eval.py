"""Multi-view evaluation against a straightforward per-video loop, metrics, and MLflow reports."""

from __future__ import annotations

import json
import math
import tarfile
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from vidtx.clips.crops import EvalTransform
from vidtx.clips.normalize import normalize_clips
from vidtx.clips.sampling import FrameSampler
from vidtx.clips.views import video_views, view_logits
from vidtx.config import DataConfig
from vidtx.data.eval_loader import build_eval_loader
from vidtx.eval.metrics import classification_metrics, combine_views
from vidtx.eval.multiview import evaluate, predict_split
from vidtx.manifest import load_manifest
from vidtx.media.decode import open_video, scaled_size
from vidtx.models import create_model
from vidtx.stages.trained_model import load_trained_model
from vidtx.tracking.evaluation import log_evaluation


def test_metrics_on_known_scores() -> None:
    scores = torch.tensor(
        [
            [0.9, 0.05, 0.03, 0.02],  # true 0, predicted 0
            [0.1, 0.2, 0.6, 0.1],  # true 1, predicted 2 (1 in top 5)
            [0.0, 0.1, 0.8, 0.1],  # true 2, predicted 2
            [0.5, 0.1, 0.3, 0.1],  # true 2, predicted 0
        ]
    )
    labels = torch.tensor([0, 1, 2, 2])
    metrics = classification_metrics(scores, labels)
    assert metrics.top1 == 0.5
    assert metrics.top5 == 1.0
    assert metrics.confusion == [[1, 0, 0, 0], [0, 0, 1, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
    assert metrics.per_class_accuracy[:3] == [1.0, 0.0, 0.5]
    assert math.isnan(metrics.per_class_accuracy[3])  # class 3 has no video
    assert metrics.mean_class_accuracy == pytest.approx(0.5)  # mean over present classes


def test_view_ensembles_can_disagree() -> None:
    # view 1 is very sure of class 0, views 2 and 3 prefer class 1 less strongly
    logits = torch.tensor([[[10.0, 0.0], [0.0, 3.0], [0.0, 3.0]]])
    scores = combine_views(logits)
    assert scores["logits_sum"].argmax().item() == 0
    assert scores["prob_mean"].argmax().item() == 1


def reference_view_logits(model: torch.nn.Module, shards: Path, split: str, config) -> dict[str, tuple]:
    """Per-video loop: read every tar member with `tarfile`, decode, sample, crop, run each view alone."""
    data = config.data
    sampler = FrameSampler(data.sampling, data.num_frames, data.frame_stride)
    transform = EvalTransform(data.crop_size, config.eval.num_crops)
    videos: dict[str, tuple] = {}
    for url in load_manifest(shards, split).shard_urls():
        with tarfile.open(url) as tar:
            members = {member.name: tar.extractfile(member).read() for member in tar.getmembers()}
        for name, payload in members.items():
            if not name.endswith(".json"):
                continue
            meta = json.loads(payload)
            video_bytes = members[name.removesuffix(".json") + ".mp4"]
            video = open_video(video_bytes, size=scaled_size(meta["width"], meta["height"], data.crop_size))
            view_logits = []
            for indices in sampler.test(video.num_frames, config.eval.num_clips):
                for view in transform(video.frames(indices)):
                    with torch.no_grad():
                        view_logits.append(model(normalize_clips(view[None], data.mean, data.std))[0])
            videos[meta["key"]] = (torch.stack(view_logits), meta["label"])
    return videos


@pytest.mark.slow
def test_evaluation_matches_a_per_video_loop(trained_run: tuple, tmp_path: Path) -> None:
    config, result = trained_run
    config = config.model_copy(deep=True)
    config.eval.split, config.eval.num_clips, config.eval.num_crops = "val", 2, 3
    model = load_trained_model(config, result.checkpoint)
    manifest = load_manifest(config.data.shards, "val")
    evaluation = evaluate(model, manifest, config.data, config.eval)
    assert evaluation.views == "2x3"
    assert set(evaluation.by_ensemble) == {"logits_sum", "prob_mean"}
    metrics = evaluation.metrics()
    for name in (
        "top1",
        "top5",
        "mean_class_accuracy",
        "logits_sum/top1",
        "prob_mean/top1",
        "loss",
        "videos",
    ):
        assert name in metrics

    reference = reference_view_logits(model, config.data.shards, "val", config)
    assert evaluation.num_videos == len(reference) == 12
    for ensemble, combine in {
        "logits_sum": lambda v: v.sum(0),
        "prob_mean": lambda v: v.softmax(-1).mean(0),
    }.items():
        correct1 = correct5 = 0
        for views, label in reference.values():
            ranked = combine(views).argsort(descending=True).tolist()
            correct1 += ranked[0] == label
            correct5 += label in ranked[:5]
        assert evaluation.by_ensemble[ensemble].top1 == pytest.approx(correct1 / len(reference))
        assert evaluation.by_ensemble[ensemble].top5 == pytest.approx(correct5 / len(reference))

    # the same evaluation over 2 Ray workers (the split shared between them) gives the same numbers
    config.eval.num_workers = 2
    distributed = evaluate(model, manifest, config.data, config.eval)
    assert distributed.num_videos == evaluation.num_videos
    for name, value in evaluation.metrics().items():
        assert distributed.metrics()[name] == pytest.approx(value, abs=1e-5)

    artifacts = log_evaluation(MlflowClient(result.tracking_uri), result.mlflow_run_id, evaluation)
    client = MlflowClient(result.tracking_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.data.metrics["eval/val/top1"] == pytest.approx(metrics["top1"])
    assert run.data.metrics["eval/val/prob_mean/top1"] == pytest.approx(metrics["prob_mean/top1"])
    assert "eval/val/skipped" not in run.data.metrics  # counts are tags: no one-bar chart of them
    assert run.data.tags["vidtx.eval.val.videos"] == str(evaluation.num_videos)
    assert run.data.tags["vidtx.eval.val.skipped"] == "0"
    logged = {info.path for info in client.list_artifacts(result.mlflow_run_id, "eval/val")}
    assert set(artifacts.values()) <= logged
    png = Path(client.download_artifacts(result.mlflow_run_id, artifacts["confusion_matrix"], str(tmp_path)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def cpu_normalised(views: torch.Tensor, mean: tuple, std: tuple) -> torch.Tensor:
    """The float path of before: (x / 255 - mean) / std on the CPU, uint8 (..., T, H, W, C) in,
    (..., C, T, H, W) out."""
    x = views.float().movedim(-1, -4) / 255.0  # (..., C, T, H, W)
    shape = (3, 1, 1, 1)
    return (x - torch.tensor(mean).view(shape)) / torch.tensor(std).view(shape)


def test_evaluation_and_predict_give_the_logits_of_the_cpu_normalisation(
    synthetic_shards: tuple[Path, Path],
) -> None:
    videos, shards = synthetic_shards
    torch.manual_seed(0)
    model = create_model("xvit_tiny", num_classes=4, num_frames=4, img_size=32).eval()
    data = DataConfig(
        shards=shards, num_frames=4, short_side=32, crop_size=32, num_workers=0,
        mean=(0.45, 0.4, 0.35), std=(0.2, 0.25, 0.3),
    )  # fmt: skip
    outputs = predict_split(model, data, "val", num_clips=2, num_crops=1, batch_size=4)
    with torch.no_grad():
        for views, _, keys in build_eval_loader(data, "val", batch_size=4, num_clips=2):
            reference = model(cpu_normalised(views.flatten(0, 1), data.mean, data.std)).view(len(keys), 2, -1)
            for key, logits in zip(keys, reference, strict=True):
                torch.testing.assert_close(
                    outputs.logits[outputs.keys.index(key)], logits, atol=1e-5, rtol=1e-5
                )
    video = sorted((videos / "val").rglob("*.mp4"))[0]
    served = view_logits(
        model, data, video_views(video.read_bytes(), data, num_clips=1, num_crops=1)
    )  # (1, K)
    frames = open_video(video.read_bytes()).frames(FrameSampler("segment", 4).test(8)[0].tolist())
    with torch.no_grad():
        reference = model(cpu_normalised(torch.from_numpy(frames)[None], data.mean, data.std))
    torch.testing.assert_close(served, reference, atol=1e-5, rtol=1e-5)
