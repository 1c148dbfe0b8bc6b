"""What every served vidtx model shares: a network and the config it was trained with, loaded from the
registered model's artifacts, answering one output row per encoded video.

Input: a DataFrame whose column `video` holds encoded videos (bytes of any container decord or PyAV
reads; over HTTP, base64) or strings naming videos (a path here, `s3://`, `gs://`). Params: the test
views `num_clips`, `num_crops` (defaults: the registered config's `eval`), and what a subclass adds.
A video that cannot be read gets a row whose `error` says why; the other rows are still answered.
Decoding, frame sampling, views and normalisation are evaluation's (`vidtx.clips.views`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import torch
from mlflow.pyfunc import PythonModel, PythonModelContext
from torch import nn

from vidtx import storage
from vidtx.clips.views import open_payload, test_views
from vidtx.config import PipelineConfig, load_config
from vidtx.locations import location
from vidtx.media.decode import Video, VideoDecodeError, VideoSource
from vidtx.models import load_checkpoint

INPUT_COLUMN = "video"
# the model's artifacts: key -> file name (MLflow copies each to <model>/artifacts/<file name>)
MODEL_FILES = {"weights": "model.pt", "config": "config.yaml"}
VIDEO_ERRORS = (OSError, VideoDecodeError, ValueError)  # what one unreadable video raises


def error_text(err: Exception) -> str:
    """Why a video could not be read, without the path (its row already names it)."""
    if isinstance(err, OSError) and err.strerror and not isinstance(err, storage.StorageError):
        return err.strerror  # "No such file or directory", "Is a directory", "no such object"
    return str(err)


def output_frame(rows: list[Any], columns: tuple[str, ...]) -> pd.DataFrame:
    """`columns` of `rows` (objects with those attributes); object dtype so that an empty cell is None
    (JSON null), not NaN."""
    return pd.DataFrame(
        {name: pd.Series([getattr(row, name) for row in rows], dtype=object) for name in columns}
    )


class ServedVideoModel(PythonModel):
    """A network and its preprocessing config, loaded from the model's artifacts (`ARTIFACT_FILES`)."""

    ARTIFACT_FILES: ClassVar[dict[str, str]] = MODEL_FILES
    OUTPUT_COLUMNS: ClassVar[tuple[str, ...]]
    module: nn.Module  # clips (B, 3, T, H, W) float32 -> the network's output
    config: PipelineConfig  # the config it was trained with: frames, crop size, normalisation, views
    class_names: list[str] | None = None  # what its logits stand for; None: an encoder, no classes

    def load_context(self, context: PythonModelContext) -> None:
        self._load({key: Path(path) for key, path in context.artifacts.items()})
        self.to_best_device()

    def to_best_device(self) -> ServedVideoModel:
        """The network on the GPU when there is one (views are moved to where its weights are)."""
        self.module.to("cuda" if torch.cuda.is_available() else "cpu")
        return self

    @classmethod
    def from_artifacts(cls, folder: Path) -> ServedVideoModel:
        """The model of a downloaded model's `artifacts/` folder, without MLflow's loader (which puts
        the model's copy of vidtx first on sys.path)."""
        model = cls()
        model._load({key: folder / name for key, name in cls.ARTIFACT_FILES.items()})
        return model

    def _load(self, files: dict[str, Path]) -> None:
        self.module = load_checkpoint(files["weights"]).eval()
        self.config = load_config(files["config"])

    def default_params(self) -> dict[str, int]:
        views = self.config.eval
        return {"num_clips": views.num_clips, "num_crops": views.num_crops}

    def predict(
        self,
        context: PythonModelContext | None,
        model_input: pd.DataFrame,
        params: dict[str, Any] | None = None,
    ) -> pd.DataFrame:
        """One output row per row of `model_input[video]`, in order (see the module docstring)."""
        if INPUT_COLUMN not in model_input.columns:
            raise ValueError(f"the input needs a column '{INPUT_COLUMN}', got {list(model_input.columns)}")
        settings = self.checked(self.default_params() | dict(params or {}))
        rows = [self.answer(video, **settings) for video in model_input[INPUT_COLUMN]]
        return output_frame(rows, self.OUTPUT_COLUMNS)

    def checked(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The params of a call, checked before any video is read (ValueError names a bad one)."""
        return settings

    def answer(self, video: bytes | str, **settings: int) -> Any:
        """The output row of one video (an object with `OUTPUT_COLUMNS` as attributes)."""
        raise NotImplementedError

    def open(self, video: bytes | str) -> Video:
        """An encoded video, or the video a string names, opened at the crop's short side. A file here
        is opened by its path, an object in a bucket by ranged GETs, and either is read as decoding
        asks, never whole, so a long video's length costs no memory."""
        payload: VideoSource
        if isinstance(video, str):
            payload = storage.readable_file(location(video))
        elif isinstance(video, bytes | bytearray | memoryview):
            payload = bytes(video)
        else:
            raise ValueError(f"not a video: expected encoded bytes or a path, got {type(video).__name__}")
        return open_payload(payload, self.config.data)

    def views(self, video: bytes | str, num_clips: int, num_crops: int) -> torch.Tensor:
        """The test views, uint8 (num_clips * num_crops, T, crop, crop, C), of an encoded video or of
        the video a string names."""
        decoded = self.open(video)
        return test_views(decoded, self.config.data, num_clips, num_crops, (0, decoded.num_frames))
