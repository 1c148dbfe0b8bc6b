"""The plain types that cross from one stage to the next: a sharded split, an evaluation's metrics and
result, a video's prediction, a registered model version. The standard library only, so that what imports
them (the served model, `vidtx predict`, the flows' parameters) loads nothing else for them."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ShardedSplit:
    """One split as the shard stage reports it."""

    manifest: str  # path of <split>.manifest.json
    content_hash: str
    samples: int
    rejects: int


@dataclasses.dataclass
class ClassificationMetrics:
    """Video-level metrics of one ensemble over a split, from `classification_metrics`.

    Part of the evaluation result: logged to MLflow, rendered in reports and the model card, and
    the source of the register stage's promotion metric. Accuracies are fractions in [0, 1].
    """

    top1: float
    top5: float  # label among the top min(5, K) scores
    mean_class_accuracy: float  # mean of per_class_accuracy over classes present in the split
    per_class_accuracy: list[float]  # recall per true class (NaN for classes absent from the split)
    confusion: list[list[int]]  # rows: true class, columns: predicted class
    num_videos: int

    def scalars(self, prefix: str = "") -> dict[str, float]:
        return {
            f"{prefix}top1": self.top1,
            f"{prefix}top5": self.top5,
            f"{prefix}mean_class_accuracy": self.mean_class_accuracy,
        }

    @property
    def support(self) -> list[int]:
        """Videos per true class."""
        return [sum(row) for row in self.confusion]

    def per_class(self) -> tuple[str, list[float]]:
        """The per-class figure of the per-class tables: its column name and one value per class."""
        return "accuracy", self.per_class_accuracy


@dataclasses.dataclass
class MultiLabelMetrics:
    """Video-level metrics of a multi-label model (several labels per video) over a split, for one way
    of combining the views, from `vidtx.eval.multilabel.multilabel_metrics`.

    AP is scikit-learn's `average_precision_score`, class by class. A class without a positive video
    in the split has no AP: None in `per_class_ap` (not NaN, so that the JSON of a result, a Prefect
    artifact or an MLflow table holds no non-standard number, and so that summing it fails loudly),
    and it is left out of `mean_ap`. F1 predicts a class when its probability is >= `threshold`.
    """

    mean_ap: float  # macro mAP: the mean of per_class_ap over classes with a positive (NaN if none has)
    per_class_ap: list[float | None]  # None for a class without a positive video
    micro_f1: float  # from the true/false positives and false negatives of all classes pooled
    macro_f1: float  # mean per-class F1 over classes with a positive or a prediction
    support: list[int]  # positive videos per class
    threshold: float
    num_videos: int

    def scalars(self, prefix: str = "") -> dict[str, float]:
        return {
            f"{prefix}mean_ap": self.mean_ap,
            f"{prefix}micro_f1": self.micro_f1,
            f"{prefix}macro_f1": self.macro_f1,
        }

    def per_class(self) -> tuple[str, list[float | None]]:
        """The per-class figure of the per-class tables: its column name and one value per class."""
        return "ap", self.per_class_ap


# What one way of combining views scores: top-1 and the rest for a single-label model, mAP and F1 for
# a multi-label one. Both have `scalars`, `support` and `per_class`, which the reports read.
Metrics = ClassificationMetrics | MultiLabelMetrics


@dataclasses.dataclass
class EvalResult:
    """The multi-view evaluation of one model on one split: what the registry compares and logs.

    A single-label model's `by_ensemble` holds `ClassificationMetrics` per view ensemble
    ("logits_sum", "prob_mean"); a multi-label model's holds `MultiLabelMetrics` per view aggregation
    of the sigmoid probabilities ("mean", "max"), and `loss` is then `video_bce`.
    """

    split: str
    views: str  # "clips x crops"
    primary: str  # the ensemble (multi-label: the aggregation) that `metrics()` reports unprefixed
    by_ensemble: dict[str, Metrics]
    loss: float
    num_videos: int
    num_skipped: int  # in the manifest but not decodable now
    class_names: list[str]
    manifest_hash: str  # with `views`, what makes two results comparable

    @property
    def multilabel(self) -> bool:
        return isinstance(self.by_ensemble[self.primary], MultiLabelMetrics)

    def metrics(self) -> dict[str, float]:
        """Flat scalars: the primary ensemble unprefixed, then every ensemble under its name."""
        flat = self.by_ensemble[self.primary].scalars()
        for ensemble, metrics in self.by_ensemble.items():
            flat |= metrics.scalars(f"{ensemble}/")
        return flat | {
            "loss": self.loss,
            "videos": float(self.num_videos),
            "skipped": float(self.num_skipped),
        }


@dataclasses.dataclass
class ModelVersionInfo:
    """What the register stage registered: the new model version and the promotion decision."""

    name: str  # registered model name (`registry.model_name`)
    version: str
    model_uri: str  # models:/<name>/<version>
    aliases: list[str]  # the version's aliases after registration (challenger, maybe champion)
    promoted: bool  # became champion
    reason: str  # why it did or did not become champion, or got no alias
    run_id: str  # the MLflow run the model was logged into (the training run)

    @property
    def alias_text(self) -> str:
        return ", ".join(self.aliases) or "none"

    def summary(self) -> str:
        """One line: the version, its aliases and why."""
        return f"registered {self.model_uri} aliases {self.alias_text}: {self.reason}"


@dataclasses.dataclass
class Classification:
    """One video's row of the output; an unreadable video has only `error`."""

    label: str | None = None
    score: float | None = None
    top_k_labels: list[str] = dataclasses.field(default_factory=list)
    top_k_scores: list[float] = dataclasses.field(default_factory=list)
    labels: list[str] | None = None  # a multi-label model's classes at or above its threshold, best first
    label_scores: list[float] | None = None  # their probabilities
    error: str | None = None
    embedding: list[float] | None = None  # the pre-logits features, when asked for


@dataclasses.dataclass
class WindowClassification(Classification):
    """A row of a long video scored window by window: one window's, or (`window` None) the whole
    video's, aggregated from its windows (the mean of their probabilities and embeddings)."""

    window: int | None = None
    start: float | None = None  # seconds
    end: float | None = None
    note: str | None = None  # e.g. a window longer than the video: one window


@dataclasses.dataclass
class Embedding:
    """One video's row of a served encoder's output: its features, or only `error`."""

    embedding: list[float] = dataclasses.field(default_factory=list)
    error: str | None = None


@dataclasses.dataclass
class PredictionSummary:
    model_uri: str  # the version that answered: models:/<name>/<version>
    videos: int
    failed: int  # rows with an error
    output: str | None  # the table (a path or a bucket URL), when one was written

    def text(self) -> str:
        table = f", table {self.output}" if self.output is not None else ""
        return f"{self.videos} videos scored by {self.model_uri}, {self.failed} unreadable{table}"
