"""Video-level classification metrics from per-view logits."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

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


@dataclasses.dataclass
class ClassificationMetrics:
    top1: float
    top5: float
    mean_class_accuracy: float
    per_class_accuracy: list[float]  # recall per true class (NaN for classes absent from the split)
    confusion: list[list[int]]  # rows: true class, columns: predicted class
    num_videos: int

    def scalars(self, prefix: str = "") -> dict[str, float]:
        return {
            f"{prefix}top1": self.top1,
            f"{prefix}top5": self.top5,
            f"{prefix}mean_class_accuracy": self.mean_class_accuracy,
        }


def classification_metrics(scores: torch.Tensor, labels: torch.Tensor) -> ClassificationMetrics:
    """scores (N, K) (logits or probabilities), labels (N,) -> top-1/5, mean class accuracy, confusion."""
    num_classes = scores.shape[1]
    top = scores.topk(min(5, num_classes), dim=1).indices  # (N, 5)
    predictions = top[:, 0]
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    confusion.index_put_((labels, predictions), torch.ones_like(labels), accumulate=True)
    support = confusion.sum(dim=1)
    per_class = confusion.diag().double() / support.double()  # NaN where support is 0
    present = support > 0
    count = max(len(labels), 1)
    return ClassificationMetrics(
        top1=(predictions == labels).sum().item() / count,
        top5=(top == labels[:, None]).any(dim=1).sum().item() / count,
        mean_class_accuracy=per_class[present].mean().item() if present.any() else float("nan"),
        per_class_accuracy=per_class.tolist(),
        confusion=confusion.tolist(),
        num_videos=len(labels),
    )


def video_loss(view_logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean cross entropy of the per-video mean probabilities (N, V, K) -> scalar."""
    probabilities = F.softmax(view_logits.float(), dim=-1).mean(dim=1)
    return F.nll_loss(probabilities.clamp_min(1e-12).log(), labels).item()
