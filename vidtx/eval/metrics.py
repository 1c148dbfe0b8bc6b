"""Video-level classification metrics from per-view logits."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vidtx.results import ClassificationMetrics

ENSEMBLES = ("logits_sum", "prob_mean")


def combine_views(view_logits: torch.Tensor) -> dict[str, torch.Tensor]:
    """(N, V, K) logits of V views per video -> per-video scores (N, K) for both ensembles.

    logits_sum: the sum of raw logits (the official X-ViT / SlowFast test code);
    prob_mean: the mean of softmax probabilities (what the TimeSformer paper and mmaction2 describe).
    """
    return {
        "logits_sum": view_logits.float().sum(dim=1),
        "prob_mean": F.softmax(view_logits.float(), dim=-1).mean(dim=1),
    }


def top_k_correct(scores: torch.Tensor, labels: torch.Tensor) -> tuple[int, int]:
    """How many of scores (N, K) rank the label (N,) first, and among the first five (top-1, top-5)."""
    top = scores.topk(min(5, scores.shape[1]), dim=1).indices  # (N, min(5, K))
    return (top[:, 0] == labels).sum().item(), (top == labels[:, None]).any(dim=1).sum().item()


def classification_metrics(scores: torch.Tensor, labels: torch.Tensor) -> ClassificationMetrics:
    """scores (N, K) (logits or probabilities), labels (N,) -> top-1/5, mean class accuracy, confusion."""
    num_classes = scores.shape[1]
    predictions = scores.argmax(dim=1)
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    confusion.index_put_((labels, predictions), torch.ones_like(labels), accumulate=True)
    support = confusion.sum(dim=1)
    per_class = confusion.diag().double() / support.double()  # NaN where support is 0
    present = support > 0
    count = max(len(labels), 1)
    correct1, correct5 = top_k_correct(scores, labels)
    return ClassificationMetrics(
        top1=correct1 / count,
        top5=correct5 / count,
        mean_class_accuracy=per_class[present].mean().item() if present.any() else float("nan"),
        per_class_accuracy=per_class.tolist(),
        confusion=confusion.tolist(),
        num_videos=len(labels),
    )


def video_loss(view_logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean cross entropy of the per-video mean probabilities (N, V, K) -> scalar."""
    probabilities = F.softmax(view_logits.float(), dim=-1).mean(dim=1)
    return F.nll_loss(probabilities.clamp_min(1e-12).log(), labels).item()
