"""The registered classifier as MLflow runs it: a pyfunc video classifier, encoded videos in, classes out.

Input and views as every served model takes them (`vidtx.serving.video_model`), plus the params
`top_k` (default 5), `embedding` (default false) and, for a multi-label model, `threshold` (default:
its `eval.threshold`). Output, one row per input row: `label` and `score` (the top class and its
probability: softmax, or a multi-label model's sigmoid, combined over the views), `top_k_labels` and
`top_k_scores` (best first); a multi-label model's `labels` and `label_scores`: every class whose
probability reaches the threshold, best first (empty lists when none does; None for a single-label
model); `error`: None, or why that video could not be read, in which case the other columns are
empty; and `embedding`, when asked for: the pre-logits features (what the classifier layer is
given), the mean over the views, from the same forward pass.

A multi-label model combines its views' sigmoids as its `eval.view_aggregation` says (mean or max),
as its evaluation did; a single-label model averages its views' softmax.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from vidtx.clips.views import test_views, view_logits, view_logits_and_pre_logits
from vidtx.clips.windows import plan_windows
from vidtx.config import PipelineConfig
from vidtx.eval.multilabel import view_probabilities
from vidtx.models.heads import classifier_layer
from vidtx.results import Classification, WindowClassification
from vidtx.serving.video_model import MODEL_FILES, VIDEO_ERRORS, ServedVideoModel, error_text

OUTPUT_COLUMNS = (
    "label",
    "score",
    "top_k_labels",
    "top_k_scores",
    "labels",
    "label_scores",
    "error",
    "embedding",
)
DEFAULT_TOP_K = 5


class VideoClassifier(ServedVideoModel):
    """The network, its preprocessing config and its class names; loaded from the model's artifacts."""

    ARTIFACT_FILES: ClassVar[dict[str, str]] = MODEL_FILES | {"class_names": "labels.json"}
    OUTPUT_COLUMNS: ClassVar[tuple[str, ...]] = OUTPUT_COLUMNS
    class_names: list[str]  # index = logit index

    @classmethod
    def of(cls, module: nn.Module, config: PipelineConfig, class_names: list[str]) -> VideoClassifier:
        """The classifier around a network in memory (what registering it would serve)."""
        classifier = cls()
        classifier.module, classifier.config, classifier.class_names = module.eval(), config, class_names
        return classifier

    def _load(self, files: dict[str, Path]) -> None:
        super()._load(files)
        self.class_names = json.loads(files["class_names"].read_text())

    @functools.cached_property
    def classifier(self) -> nn.Linear:
        """The network's classifier layer, which the embedding is given to (found once: a long video's
        windows each ask for it)."""
        return classifier_layer(self.module, len(self.class_names))[1]

    @property
    def multi_label(self) -> bool:
        return self.config.model.task == "multi_label"

    def default_params(self) -> dict[str, int | bool | float]:
        threshold = {"threshold": self.config.eval.threshold} if self.multi_label else {}
        return {"top_k": DEFAULT_TOP_K} | super().default_params() | {"embedding": False} | threshold

    def checked(self, settings: dict[str, Any]) -> dict[str, Any]:
        threshold = settings.get("threshold")
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            raise ValueError(
                f"threshold {threshold:g} is outside [0, 1]: a class is returned from this probability"
            )
        return settings

    def answer(self, video: bytes | str, **settings: int) -> Classification:
        return self.classify(video, **settings)

    def classify(
        self,
        video: bytes | str,
        *,
        top_k: int,
        num_clips: int,
        num_crops: int,
        embedding: bool = False,
        threshold: float | None = None,
    ) -> Classification:
        try:
            views = self.views(video, num_clips, num_crops)
        except VIDEO_ERRORS as err:
            return Classification(error=error_text(err))
        probabilities, pre_logits = self.scores(views)
        return self.ranked(probabilities, pre_logits if embedding else None, top_k, threshold)

    def classify_windows(
        self,
        video: bytes | str,
        *,
        window: float,
        hop: float,
        top_k: int,
        num_clips: int,
        num_crops: int,
        embedding: bool = False,
        threshold: float | None = None,
    ) -> list[WindowClassification]:
        """A row per window of `window` seconds every `hop` seconds (`vidtx.clips.windows`), each from
        its own test views, then the video's row: the mean of the windows' probabilities (and
        embeddings). One row with the error for a video that cannot be read; a window whose frames
        cannot be decoded is a row with its error, and the others go on."""
        try:
            decoded = self.open(video)
        except VIDEO_ERRORS as err:
            return [WindowClassification(error=error_text(err))]
        windows, note = plan_windows(decoded.num_frames, decoded.fps, window, hop)
        rows, scores = [], []
        for span in windows:
            where = {"window": span.index, "start": span.start, "end": span.end, "note": note}
            try:
                views = test_views(decoded, self.config.data, num_clips, num_crops, (span.first, span.last))
            except VIDEO_ERRORS as err:
                rows.append(WindowClassification(error=error_text(err), **where))
                continue
            probabilities, pre_logits = self.scores(views)
            scores.append((probabilities, pre_logits))
            ranked = self.ranked(probabilities, pre_logits if embedding else None, top_k, threshold)
            rows.append(WindowClassification(**vars(ranked), **where))
        if not scores:
            return [*rows, WindowClassification(error="no window could be decoded", note=note)]
        mean = [torch.stack(column).mean(dim=0) for column in zip(*scores, strict=True)]
        whole = self.ranked(mean[0], mean[1] if embedding else None, top_k, threshold)
        duration = windows[-1].end
        return [*rows, WindowClassification(**vars(whole), start=0.0, end=duration, note=note)]

    def scores(self, views: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The class probabilities (K,) of a video's views (softmax, the mean over the views; a
        multi-label model's sigmoids, combined as its `eval.view_aggregation` says) and their
        pre-logits embedding (D,), the mean over the views, from one forward pass."""
        logits, pre_logits = view_logits_and_pre_logits(self.module, self.classifier, self.config.data, views)
        if self.multi_label:
            probabilities = view_probabilities(logits[None], self.config.eval.view_aggregation)[0]
        else:
            probabilities = logits.softmax(dim=-1).mean(dim=0)
        return probabilities, pre_logits.mean(dim=0)

    def ranked(
        self,
        probabilities: torch.Tensor,
        embedding: torch.Tensor | None,
        top_k: int,
        threshold: float | None = None,
    ) -> Classification:
        """A video's row from its probabilities (K,): the top class, the top k and, for a multi-label
        model, every class at or above `threshold` (default: the model's `eval.threshold`)."""
        order = probabilities.argsort(descending=True).tolist()
        names, scores = [self.class_names[i] for i in order], probabilities[order].tolist()
        k = min(top_k, len(names))
        row = Classification(names[0], scores[0], names[:k], scores[:k])
        if embedding is not None:
            row.embedding = embedding.tolist()
        if self.multi_label:
            floor = self.config.eval.threshold if threshold is None else threshold
            above = sum(score >= floor for score in scores)  # scores are sorted
            row.labels, row.label_scores = names[:above], scores[:above]
        return row

    def view_logits(self, video: bytes | str, num_clips: int, num_crops: int) -> torch.Tensor:
        """Logits (num_clips * num_crops, K) of an encoded video or of the video a string names."""
        return view_logits(self.module, self.config.data, self.views(video, num_clips, num_crops))
