"""The registered model as MLflow runs it: a pyfunc video classifier, encoded videos in, classes out.

Input: a DataFrame whose column `video` holds encoded videos (bytes of any container decord or PyAV
reads; over HTTP, base64) or strings naming videos (a path here, `s3://`, `gs://`). Params: `top_k`
(default 5) and the test views `num_clips`, `num_crops` (defaults: the registered config's `eval`).

Output, one row per input row: `label` and `score` (the top class and its softmax probability, the
mean over the views), `top_k_labels` and `top_k_scores` (best first), and `error`: None, or why that
video could not be read, in which case the other columns are empty and the other rows are still
predicted. Decoding, frame sampling, views and normalisation are evaluation's (`vidtx.clips.views`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from mlflow.pyfunc import PythonModel, PythonModelContext
from torch import nn

from vidtx import storage
from vidtx.clips.views import video_views, view_logits
from vidtx.config import PipelineConfig, load_config
from vidtx.locations import location
from vidtx.media.decode import VideoDecodeError
from vidtx.models import load_checkpoint
from vidtx.results import Classification

INPUT_COLUMN = "video"
OUTPUT_COLUMNS = ("label", "score", "top_k_labels", "top_k_scores", "error")
DEFAULT_TOP_K = 5
# the model's artifacts: key -> file name (MLflow copies each to <model>/artifacts/<file name>)
ARTIFACT_FILES = {"weights": "model.pt", "config": "config.yaml", "class_names": "labels.json"}
VIDEO_ERRORS = (OSError, VideoDecodeError, ValueError)  # what one unreadable video raises


def error_text(err: Exception) -> str:
    """Why a video could not be read, without the path (its row already names it)."""
    if isinstance(err, OSError) and err.strerror and not isinstance(err, storage.StorageError):
        return err.strerror  # "No such file or directory", "Is a directory", "no such object"
    return str(err)


def predictions_frame(rows: list[Classification]) -> pd.DataFrame:
    """The output columns; object dtype so that an empty cell is None (JSON null), not NaN."""
    columns = {name: pd.Series([getattr(row, name) for row in rows], dtype=object) for name in OUTPUT_COLUMNS}
    return pd.DataFrame(columns)


class VideoClassifier(PythonModel):
    """The network, its preprocessing config and its class names; loaded from the model's artifacts."""

    module: nn.Module  # clips (B, 3, T, H, W) float32 -> logits (B, K)
    config: PipelineConfig  # the config it was trained with: frames, crop size, normalisation, views
    class_names: list[str]  # index = logit index

    def load_context(self, context: PythonModelContext) -> None:
        self._load({key: Path(path) for key, path in context.artifacts.items()})
        self.to_best_device()

    def to_best_device(self) -> VideoClassifier:
        """The network on the GPU when there is one (views are moved to where its weights are)."""
        self.module.to("cuda" if torch.cuda.is_available() else "cpu")
        return self

    @classmethod
    def of(cls, module: nn.Module, config: PipelineConfig, class_names: list[str]) -> VideoClassifier:
        """The classifier around a network in memory (what registering it would serve)."""
        classifier = cls()
        classifier.module, classifier.config, classifier.class_names = module.eval(), config, class_names
        return classifier

    @classmethod
    def from_artifacts(cls, folder: Path) -> VideoClassifier:
        """The classifier of a downloaded model's `artifacts/` folder, without MLflow's loader (which
        puts the model's copy of vidtx first on sys.path)."""
        classifier = cls()
        classifier._load({key: folder / name for key, name in ARTIFACT_FILES.items()})
        return classifier

    def _load(self, files: dict[str, Path]) -> None:
        self.module = load_checkpoint(files["weights"]).eval()
        self.config = load_config(files["config"])
        self.class_names = json.loads(files["class_names"].read_text())

    def default_params(self) -> dict[str, int]:
        views = self.config.eval
        return {"top_k": DEFAULT_TOP_K, "num_clips": views.num_clips, "num_crops": views.num_crops}

    def predict(
        self,
        context: PythonModelContext | None,
        model_input: pd.DataFrame,
        params: dict[str, Any] | None = None,
    ) -> pd.DataFrame:
        """One output row per row of `model_input[video]`, in order (see the module docstring)."""
        if INPUT_COLUMN not in model_input.columns:
            raise ValueError(f"the input needs a column '{INPUT_COLUMN}', got {list(model_input.columns)}")
        views = self.default_params() | dict(params or {})
        return predictions_frame([self.classify(video, **views) for video in model_input[INPUT_COLUMN]])

    def classify(self, video: bytes | str, *, top_k: int, num_clips: int, num_crops: int) -> Classification:
        try:
            probabilities = self.probabilities(video, num_clips, num_crops)
        except VIDEO_ERRORS as err:
            return Classification(error=error_text(err))
        best = probabilities.topk(min(top_k, len(self.class_names)))
        labels = [self.class_names[i] for i in best.indices.tolist()]
        scores = best.values.tolist()
        return Classification(labels[0], scores[0], labels, scores)

    def probabilities(self, video: bytes | str, num_clips: int, num_crops: int) -> torch.Tensor:
        """Softmax probabilities (K,), the mean over the video's test views."""
        return self.view_logits(video, num_clips, num_crops).softmax(dim=-1).mean(dim=0)

    def view_logits(self, video: bytes | str, num_clips: int, num_crops: int) -> torch.Tensor:
        """Logits (num_clips * num_crops, K) of an encoded video or of the video a string names."""
        if isinstance(video, str):
            payload = storage.read_bytes(location(video))
        elif isinstance(video, bytes | bytearray | memoryview):
            payload = bytes(video)
        else:
            raise ValueError(f"not a video: expected encoded bytes or a path, got {type(video).__name__}")
        data = self.config.data
        return view_logits(self.module, data, video_views(payload, data, num_clips, num_crops))
