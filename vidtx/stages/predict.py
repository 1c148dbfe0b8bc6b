"""The predict stage: a registered model on video files, with the test protocol of its own config.

Files are predicted one by one and each result is printed as it comes: a bad file (missing, a folder,
not a video, undecodable) is reported with its reason and the others go on. The registry is looked
up without side effects: MLflow creates a SQLite store (or a file store) that does not exist when it
is asked anything, so a missing store is an error naming where vidtx looked, checked first.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlparse

from mlflow.exceptions import MlflowException

from vidtx import storage
from vidtx.config import apply_overrides, validate_config
from vidtx.eval.predict import predict_videos
from vidtx.locations import bucket_of, is_remote, location
from vidtx.media.decode import VideoDecodeError
from vidtx.tracking.model_registry import LoadedModel, load_registered_model
from vidtx.tracking.runs import sqlite_file

DEMO_TRACKING_URI = "sqlite:///runs/demo/mlflow.db"  # where `make demo` registers its model
POINT_ELSEWHERE = "point --tracking-uri (or MLFLOW_TRACKING_URI) at the store the model was registered in"
FILE_ERRORS = (OSError, VideoDecodeError, ValueError)  # what one bad video file raises


class RegisteredModelNotFoundError(ValueError):
    """The registered model is not in the registry that was looked at; the message names its URI."""


def _local_store(uri: str) -> Path | None:
    """The database file or folder of a local tracking store (sqlite:///, file:, a path), else None."""
    if (database := sqlite_file(uri)) is not None:
        return database
    parsed = urlparse(uri)
    return Path(parsed.path) if parsed.scheme in ("", "file") else None


def find_registered_model(model_uri: str, tracking_uri: str) -> LoadedModel:
    """The registered model, or RegisteredModelNotFoundError naming the registry and how to point
    elsewhere; a local store that does not exist is reported, not created."""
    store = _local_store(tracking_uri)
    if store is not None and not store.exists():
        raise RegisteredModelNotFoundError(
            f"{model_uri}: no MLflow registry at {tracking_uri} ({store.absolute()} does not exist); "
            f"{POINT_ELSEWHERE}"
        )
    try:
        return load_registered_model(model_uri, tracking_uri=tracking_uri)
    except MlflowException as err:
        reason = err.message.strip().splitlines()[0]
        raise RegisteredModelNotFoundError(
            f"{model_uri}: not found in the MLflow registry at {tracking_uri} ({reason}); {POINT_ELSEWHERE}"
        ) from err


def predict_files(
    model_uri: str,
    videos: Sequence[str],
    tracking_uri: str | None,
    overrides: Sequence[str],
    top_k: int,
    echo: Callable[[str], object],
    report: Callable[[str], object],
) -> int:
    """`vidtx predict`: echo each video's top-k classes as soon as it is done, `report` one line per
    video that could not be read; returns how many could not. The model's registered config decides
    frames, crops and views; `overrides` (`eval.num_crops=1`) change it for this call. The registry is
    `tracking_uri`, else MLFLOW_TRACKING_URI, else the demo's."""
    locations = [location(video) for video in videos]
    for where in {bucket_of(str(w)): w for w in locations if is_remote(w)}.values():  # once per bucket
        storage.check(where)  # an unusable bucket is one line at the start, not an error per video
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEMO_TRACKING_URI
    loaded = find_registered_model(model_uri, uri)
    config = validate_config(apply_overrides(loaded.config.model_dump(), overrides), model_uri, overrides)
    views = {"num_clips": config.eval.num_clips, "num_crops": config.eval.num_crops, "top_k": top_k}
    failed = 0
    for video in locations:
        try:
            [prediction] = predict_videos(loaded.module, config.data, loaded.class_names, [video], **views)
        except FILE_ERRORS as err:
            failed += 1
            report(f"error: {video}: {err.strerror if isinstance(err, OSError) and err.strerror else err}")
            continue
        echo("\n".join([prediction.video, *(f"  {p:6.1%}  {name}" for name, p in prediction.top)]))
    return failed
