"""Multi-label evaluation metrics (vidtx.eval.multilabel) against scikit-learn's, and their reports:
the results as text, the per-class AP table and the MLflow logging (a real MLflow on a SQLite file)."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mlflow import MlflowClient
from sklearn.metrics import average_precision_score, f1_score

from vidtx.config import PipelineConfig
from vidtx.eval.metrics import classification_metrics
from vidtx.eval.multilabel import (
    average_precision,
    mean_average_precision,
    multilabel_metrics,
    video_bce,
    view_probabilities,
)
from vidtx.eval.report import per_class_table, render_results
from vidtx.results import EvalResult, MultiLabelMetrics
from vidtx.tracking.evaluation import log_evaluation
from vidtx.tracking.runs import connect, start_or_resume_run


def tied_scores(videos: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores (N, K) on a grid of 5 values (many ties) and targets (N, K): class 0 without a positive,
    class 1 all positive, the rest random."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 5, (videos, classes), generator=generator).float() / 4
    targets = (torch.rand(videos, classes, generator=generator) < 0.3).float()
    targets[:, 0], targets[:, 1] = 0.0, 1.0
    return scores, targets


def sklearn_ap(scores: torch.Tensor, targets: torch.Tensor) -> list[float | None]:
    return [
        average_precision_score(targets[:, k].numpy(), scores[:, k].numpy()) if targets[:, k].any() else None
        for k in range(scores.shape[1])
    ]


@pytest.mark.parametrize(("videos", "seed"), [(1, 0), (7, 1), (40, 2), (300, 3)])
def test_average_precision_is_sklearn_s_with_ties_and_classes_without_positives(
    videos: int, seed: int
) -> None:
    scores, targets = tied_scores(videos, 6, seed)
    ap = average_precision(scores, targets)
    assert ap.dtype == torch.float64
    assert ap.shape == (6,)
    reference = sklearn_ap(scores, targets)
    assert reference[0] is None
    for k, expected in enumerate(reference):
        if expected is None:  # no positive: no AP
            assert math.isnan(ap[k])
        else:
            assert ap[k].item() == pytest.approx(expected, abs=1e-12, rel=0)
    present = [value for value in reference if value is not None]
    assert mean_average_precision(scores, targets) == pytest.approx(np.mean(present), abs=1e-12, rel=0)


def test_average_precision_of_continuous_scores_is_sklearn_s() -> None:
    generator = torch.Generator().manual_seed(4)
    scores = torch.rand(500, 20, generator=generator, dtype=torch.float64)
    targets = (torch.rand(500, 20, generator=generator) < scores * 0.5).float()  # informative scores
    columns = targets.any(dim=0).numpy()
    reference = average_precision_score(targets.numpy()[:, columns], scores.numpy()[:, columns], average=None)
    assert average_precision(scores, targets)[columns].numpy() == pytest.approx(reference, abs=1e-12, rel=0)


def test_ties_are_one_threshold() -> None:
    """Two videos tied at the top, one positive: precision 1/2 at that threshold, whatever their order."""
    scores = torch.tensor([[0.9], [0.9], [0.1]])
    for targets in (torch.tensor([[1.0], [0.0], [0.0]]), torch.tensor([[0.0], [1.0], [0.0]])):
        assert average_precision(scores, targets).item() == 0.5


@pytest.mark.parametrize("threshold", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_f1_is_sklearn_s(threshold: float) -> None:
    scores, targets = tied_scores(60, 8, seed=5)
    metrics = multilabel_metrics(scores, targets, threshold)
    predictions = (scores >= threshold).int().numpy()
    truth = targets.int().numpy()
    for average, value in (("micro", metrics.micro_f1), ("macro", metrics.macro_f1)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sklearn warns of the ill-defined class it leaves out
            reference = f1_score(truth, predictions, average=average, zero_division=np.nan)
        assert value == pytest.approx(reference, abs=1e-12, rel=0)


def test_macro_f1_leaves_out_a_class_neither_true_nor_predicted() -> None:
    """Class 2 is absent from the split and never predicted: it has no F1 (sklearn's zero_division=nan),
    where zero_division=0 would count it as 0 and pull the macro F1 down."""
    probabilities = torch.tensor([[0.9, 0.2, 0.1], [0.8, 0.7, 0.0], [0.1, 0.6, 0.3]])
    targets = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    metrics = multilabel_metrics(probabilities, targets, threshold=0.5)
    # class 0: TP 2 -> F1 1; class 1: TP 1, FP 1 -> F1 2/3
    assert metrics.macro_f1 == pytest.approx((1 + 2 / 3) / 2)
    assert metrics.micro_f1 == pytest.approx(2 * 3 / (2 * 3 + 1))
    assert metrics.per_class_ap == [1.0, 1.0, None]
    assert metrics.mean_ap == 1.0
    assert metrics.support == [2, 1, 0]
    assert (metrics.threshold, metrics.num_videos) == (0.5, 3)


@pytest.mark.parametrize("threshold", [-0.1, 1.5, math.nan])
def test_a_threshold_outside_0_1_is_refused_by_name(threshold: float) -> None:
    scores, targets = tied_scores(4, 3, seed=6)
    with pytest.raises(ValueError, match=rf"threshold {threshold} is outside \[0, 1\]"):
        multilabel_metrics(scores, targets, threshold)


def test_targets_must_be_multi_hot_and_shaped_as_the_scores() -> None:
    scores = torch.rand(4, 3)
    with pytest.raises(ValueError, match="multi-hot"):
        average_precision(scores, torch.full((4, 3), 0.5))
    with pytest.raises(ValueError, match=r"\(4, 3\) and targets \(4, 2\)"):
        average_precision(scores, torch.zeros(4, 2))


def test_mean_and_max_aggregation_of_the_views() -> None:
    logits = torch.tensor([[[2.0, -1.0], [-2.0, -3.0]]])  # (N=1, V=2, K=2)
    views = torch.sigmoid(logits[0])  # (V, K)
    assert torch.equal(view_probabilities(logits, "mean"), views.mean(dim=0, keepdim=True))
    assert torch.equal(view_probabilities(logits, "max"), views.amax(dim=0, keepdim=True))
    # a class seen confidently in one view only: max ranks it first, the mean second
    logits = torch.tensor([[[4.0, 0.5], [-4.0, 0.5]], [[0.0, -4.0], [0.0, -4.0]]])  # (2, 2, 2)
    targets = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    assert average_precision(view_probabilities(logits, "max"), targets)[0] == 1.0
    assert average_precision(view_probabilities(logits, "mean"), targets)[0] == 0.5
    with pytest.raises(ValueError, match="'median' is not one of mean, max"):
        view_probabilities(logits, "median")


def test_video_bce_is_the_bce_of_the_mean_view_probabilities() -> None:
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(6, 4, 5, generator=generator, dtype=torch.float64) * 3  # (N, V, K)
    targets = (torch.rand(6, 5, generator=generator) < 0.4).float()
    mean = torch.sigmoid(logits).mean(dim=1)
    assert video_bce(logits, targets) == pytest.approx(F.binary_cross_entropy(mean, targets.double()).item())
    one_view = logits[:, :1]  # with one view: BCE with logits
    expected = F.binary_cross_entropy_with_logits(one_view[:, 0], targets.double()).item()
    assert video_bce(one_view, targets) == pytest.approx(expected, rel=1e-12)
    # confident and wrong: large and finite (no probability rounded to 0 or 1)
    assert video_bce(torch.full((1, 2, 1), 60.0), torch.zeros(1, 1)) == pytest.approx(60.0)
    with pytest.raises(ValueError, match="not \\(N, V, K\\)"):
        video_bce(logits, targets[:, :3])


def multilabel_result() -> EvalResult:
    """A multi-label evaluation of 3 classes, the last without a positive video."""
    logits = torch.tensor(
        [
            [[3.0, -1.0, -2.0], [1.0, 2.0, -3.0]],
            [[-2.0, 1.0, 0.5], [-1.0, -0.5, -1.0]],
            [[0.5, 0.2, -1.0], [2.5, -2.0, -2.0]],
            [[-3.0, -1.0, -0.5], [-2.0, 1.5, -4.0]],
        ]
    )  # (N=4, V=2, K=3)
    targets = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    return EvalResult(
        split="val",
        views="1x2",
        primary="max",
        by_ensemble={
            name: multilabel_metrics(view_probabilities(logits, name), targets, threshold=0.6)
            for name in ("mean", "max")
        },
        loss=video_bce(logits, targets),
        num_videos=4,
        num_skipped=1,
        class_names=["run", "jump", "swim"],
        manifest_hash="abc",
    )


def test_the_report_shows_map_f1_and_the_per_class_ap_table() -> None:
    result = multilabel_result()
    assert result.multilabel
    primary = result.by_ensemble["max"]
    assert isinstance(primary, MultiLabelMetrics)
    text = render_results(result)
    assert "| aggregation | mAP | micro F1 | macro F1 |" in text
    assert (
        f"| max (primary) | {primary.mean_ap:.4f} | {primary.micro_f1:.4f} | {primary.macro_f1:.4f} |" in text
    )
    assert "from probability 0.6" in text
    assert "4 videos (1 skipped)" in text
    table = per_class_table(result).splitlines()
    assert table[0] == "| class_id | class | support | ap_mean | ap_max |"
    assert table[2].startswith("| 0 | run | 2 | ")
    assert table[4] == "| 2 | swim | 0 | - | - |"  # no positive: no AP


@pytest.fixture(scope="module")
def tracking(tmp_path_factory: pytest.TempPathFactory) -> MlflowClient:
    """One tracking store for the module's runs (creating its SQLite schema takes seconds)."""
    return connect(f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}")


def test_multilabel_results_are_logged_to_mlflow_with_the_per_class_ap_table(
    tracking: MlflowClient, tmp_path: Path
) -> None:
    client = tracking
    run_id = start_or_resume_run(client, PipelineConfig(), "multi-label")
    result = multilabel_result()
    artifacts = log_evaluation(client, run_id, result)
    run = client.get_run(run_id)
    primary, other = result.by_ensemble["max"], result.by_ensemble["mean"]
    assert run.data.metrics["eval/val/mean_ap"] == pytest.approx(primary.mean_ap)
    assert run.data.metrics["eval/val/micro_f1"] == pytest.approx(primary.micro_f1)
    assert run.data.metrics["eval/val/macro_f1"] == pytest.approx(primary.macro_f1)
    assert run.data.metrics["eval/val/mean/mean_ap"] == pytest.approx(other.mean_ap)
    assert run.data.metrics["eval/val/loss"] == pytest.approx(result.loss)
    assert not any("top1" in name for name in run.data.metrics)
    assert run.data.tags["vidtx.eval.val.aggregation"] == "max"
    assert run.data.tags["vidtx.eval.val.threshold"] == "0.6"
    assert run.data.tags["vidtx.eval.val.videos"] == "4"
    assert "confusion_matrix" not in artifacts
    logged = {info.path for info in client.list_artifacts(run_id, "eval/val")}
    assert logged == {"eval/val/per_class.json", "eval/val/per_class.csv"} == set(artifacts.values())
    table = json.loads(
        Path(client.download_artifacts(run_id, artifacts["per_class_table"], str(tmp_path))).read_text()
    )
    assert table["columns"] == ["class_id", "class", "support", "ap_mean", "ap_max"]
    assert table["data"][0][:3] == [0, "run", 2]
    assert table["data"][0][4] == pytest.approx(primary.per_class_ap[0])
    assert table["data"][2][3:] == [None, None]  # swim: no positive, no AP


def test_single_label_results_still_log_the_confusion_matrix(tracking: MlflowClient, tmp_path: Path) -> None:
    client = tracking
    run_id = start_or_resume_run(client, PipelineConfig(), "single-label")
    scores = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    labels = torch.tensor([0, 1, 1])
    result = EvalResult(
        split="test",
        views="1x1",
        primary="logits_sum",
        by_ensemble={"logits_sum": classification_metrics(scores, labels)},
        loss=0.5,
        num_videos=3,
        num_skipped=0,
        class_names=["a", "b"],
        manifest_hash="abc",
    )
    assert not result.multilabel
    artifacts = log_evaluation(client, run_id, result)
    run = client.get_run(run_id)
    assert run.data.metrics["eval/test/top1"] == pytest.approx(2 / 3)
    assert run.data.tags["vidtx.eval.test.ensemble"] == "logits_sum"
    logged = {info.path for info in client.list_artifacts(run_id, "eval/test")}
    assert (
        logged
        == set(artifacts.values())
        == {
            "eval/test/confusion_matrix.png",
            "eval/test/per_class.json",
            "eval/test/per_class.csv",
        }
    )
    assert "| ensemble | top-1 | top-5 | mean class accuracy |" in render_results(result)
    table = json.loads(
        Path(client.download_artifacts(run_id, artifacts["per_class_table"], str(tmp_path))).read_text()
    )
    assert table["columns"] == ["class_id", "class", "support", "accuracy_logits_sum"]
    assert table["data"] == [[0, "a", 1, 1.0], [1, "b", 2, 0.5]]
