"""Multi-label metrics (several labels per video) from per-view logits: the views combined into class
probabilities, average precision and mAP as scikit-learn computes them, F1 at a threshold, the
validation loss. Targets are multi-hot (N, K) tensors of 0 and 1."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from vidtx.results import MultiLabelMetrics

AGGREGATIONS = ("mean", "max")


def view_probabilities(view_logits: torch.Tensor, aggregation: str) -> torch.Tensor:
    """(N, V, K) logits of V views per video -> (N, K) class probabilities: the sigmoid of every view,
    then their mean or their max over the views."""
    probabilities = torch.sigmoid(view_logits.float())  # (N, V, K)
    if aggregation == "mean":
        return probabilities.mean(dim=1)
    if aggregation == "max":
        return probabilities.amax(dim=1)
    raise ValueError(f"aggregation {aggregation!r} is not one of {', '.join(AGGREGATIONS)}")


def _check_targets(scores: torch.Tensor, targets: torch.Tensor) -> None:
    if scores.ndim != 2 or targets.shape != scores.shape:
        raise ValueError(
            f"scores {tuple(scores.shape)} and targets {tuple(targets.shape)} must both be (N, K)"
        )
    if not ((targets == 0) | (targets == 1)).all():
        raise ValueError("targets must be multi-hot: every entry 0 or 1")


def average_precision(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-class average precision (K,) float64 of scores (N, K) against multi-hot targets (N, K); NaN
    for a class without a positive.

    scikit-learn's `average_precision_score(targets[:, k], scores[:, k])` for every class k: the
    thresholds are the distinct scores, in descending order, and AP = sum_n (R_n - R_{n-1}) P_n, with
    P_n and R_n the precision and recall of predicting every video scored >= the n-th threshold (no
    interpolation). Tied scores are one threshold: the recall they add is weighted by the precision
    at the last of them. So AP = (1 / positives) * sum over positive videos of the precision at the
    end of the video's tie group, which is what is computed here, for all classes at once.
    """
    _check_targets(scores, targets)
    count = scores.shape[0]
    order = scores.argsort(dim=0, descending=True)  # (N, K); the order within ties does not matter
    ranked = scores.gather(0, order)  # (N, K) descending per class
    hits = targets.gather(0, order).double()  # (N, K)
    true_positives = hits.cumsum(dim=0)  # (N, K): among the first n + 1 ranked
    precision = true_positives / torch.arange(1, count + 1, dtype=torch.float64)[:, None]  # (N, K)
    # the last position of each tie group is a threshold; every position takes its group's last
    last = torch.ones_like(ranked, dtype=torch.bool)  # (N, K)
    last[:-1] = ranked[:-1] != ranked[1:]
    positions = torch.arange(count)[:, None].expand_as(ranked)  # (N, K)
    candidates = torch.where(last, positions, count)  # (N, K)
    group_end = candidates.flip(0).cummin(dim=0).values.flip(0)  # (N, K): first threshold at or after n
    precision_at_threshold = precision.gather(0, group_end)  # (N, K)
    positives = hits.sum(dim=0)  # (K,)
    return (hits * precision_at_threshold).sum(dim=0) / positives  # (K,): 0 / 0 = NaN without positives


def _macro(ap: torch.Tensor) -> float:
    """The mean of per-class AP (K,) over the classes with a positive (NaN when none has one)."""
    scored = ap[~ap.isnan()]
    return scored.mean().item() if len(scored) else math.nan


def mean_average_precision(scores: torch.Tensor, targets: torch.Tensor) -> float:
    """Macro mAP of scores (N, K) against multi-hot targets (N, K): the mean `average_precision` over
    the classes with a positive."""
    return _macro(average_precision(scores, targets))


def _f1(
    true_positives: torch.Tensor, false_positives: torch.Tensor, false_negatives: torch.Tensor
) -> torch.Tensor:
    """2 TP / (2 TP + FP + FN), elementwise; NaN where nothing was true or predicted."""
    return 2 * true_positives / (2 * true_positives + false_positives + false_negatives)


def multilabel_metrics(
    probabilities: torch.Tensor, targets: torch.Tensor, threshold: float
) -> MultiLabelMetrics:
    """probabilities (N, K) of one view aggregation, multi-hot targets (N, K) -> mAP, per-class AP,
    micro and macro F1 at `threshold` (a class is predicted when its probability is >= threshold).

    F1 is scikit-learn's `f1_score(targets, predictions, average=..., zero_division=nan)`: macro is
    the mean per-class F1 over the classes with a positive or a prediction (a class absent from the
    split and never predicted has no F1, rather than counting as 0); micro pools every class's
    counts. mAP is the mean AP over the classes with a positive.
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold {threshold} is outside [0, 1]")
    ap = average_precision(probabilities, targets)  # (K,); checks the shapes and values
    truth = targets.bool()  # (N, K)
    predicted = probabilities >= threshold  # (N, K)
    true_positives = (predicted & truth).sum(dim=0).double()  # (K,)
    false_positives = (predicted & ~truth).sum(dim=0).double()  # (K,)
    false_negatives = (~predicted & truth).sum(dim=0).double()  # (K,)
    per_class_f1 = _f1(true_positives, false_positives, false_negatives)  # (K,), NaN: nothing to score
    micro = _f1(true_positives.sum(), false_positives.sum(), false_negatives.sum())
    return MultiLabelMetrics(
        mean_ap=_macro(ap),
        per_class_ap=[None if math.isnan(value) else value for value in ap.tolist()],
        micro_f1=micro.item(),
        macro_f1=per_class_f1.nanmean().item(),
        support=truth.sum(dim=0).tolist(),
        threshold=threshold,
        num_videos=targets.shape[0],
    )


def video_bce(view_logits: torch.Tensor, targets: torch.Tensor) -> float:
    """The validation loss of a multi-label model: the binary cross-entropy of each video's mean
    probabilities over its views, (N, V, K) logits against multi-hot (N, K) targets, averaged over
    videos and classes.

    It scores the video-level prediction, as the single-label `video_loss` scores the mean softmax
    probabilities, and always the mean of the views (not `eval.view_aggregation`), so that losses
    of runs stay comparable whatever the setting. The mean probability's logarithms are taken in log
    space, log(mean_v sigmoid(x_v)) = logsumexp_v(logsigmoid(x_v)) - log V (and the same with -x for
    1 - p), so no probability is clamped, and with one view it is exactly BCE with logits.
    """
    if view_logits.ndim != 3 or targets.shape != (view_logits.shape[0], view_logits.shape[2]):
        raise ValueError(
            f"view logits {tuple(view_logits.shape)} are not (N, V, K) of targets {tuple(targets.shape)}"
        )
    logits = view_logits.double()  # (N, V, K)
    log_views = math.log(logits.shape[1])
    log_p = torch.logsumexp(F.logsigmoid(logits), dim=1) - log_views  # (N, K): log of the mean p
    log_not_p = torch.logsumexp(F.logsigmoid(-logits), dim=1) - log_views  # (N, K): log(1 - mean p)
    target = targets.double()  # (N, K)
    return -(target * log_p + (1 - target) * log_not_p).mean().item()
