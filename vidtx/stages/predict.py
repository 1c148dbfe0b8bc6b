"""The predict stage: a registered model on video files, with the test protocol of its own config."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from vidtx.config import apply_overrides, validate_config
from vidtx.eval.predict import Prediction, predict_videos
from vidtx.tracking.model_registry import load_registered_model

DEMO_TRACKING_URI = "sqlite:///runs/demo/mlflow.db"  # where `make demo` registers its model


def predict_with_registered_model(
    model_uri: str, videos: Sequence[Path], tracking_uri: str | None, overrides: Sequence[str], top_k: int
) -> list[Prediction]:
    """Top-k classes of each video. The model's registered config decides frames, crops and views;
    `overrides` (`eval.num_crops=1`) change it for this call. The tracking store is `tracking_uri`,
    else MLFLOW_TRACKING_URI, else the demo's."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEMO_TRACKING_URI
    loaded = load_registered_model(model_uri, tracking_uri=uri)
    config = validate_config(apply_overrides(loaded.config.model_dump(), overrides), model_uri, overrides)
    return predict_videos(
        loaded.module,
        config.data,
        loaded.class_names,
        list(videos),
        num_clips=config.eval.num_clips,
        num_crops=config.eval.num_crops,
        top_k=top_k,
    )
