"""The predict stage: a registered model on videos (files, folders, CSV lists, bucket prefixes), in
this process or as a Ray Data job; each result reported as it comes, all of them written as a table.

The alias is resolved to one version once, before any video is read, and only that version is used.
A bad video (missing, a folder, not a video, undecodable) is a row with its `error` and the others go
on. The registry is looked up without side effects (`resolve_version`). A registered pretrained
encoder (no classes) is refused in one line: it has nothing to predict until a fine-tune gives it a
head.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

import pandas as pd

from vidtx import storage
from vidtx.config import PredictConfig, apply_overrides, validate_config
from vidtx.locations import Location, location
from vidtx.results import PredictionSummary
from vidtx.serving.classifier import VideoClassifier
from vidtx.shard.annotations import read_csv_rows
from vidtx.shard.folder import walk
from vidtx.stages.scoring import score_here, table_schema, table_writer
from vidtx.tracking.model_registry import RegisteredModelNotFoundError, load_registered_model, resolve_version

DEMO_TRACKING_URI = "sqlite:///runs/demo/mlflow.db"  # where `make demo` registers its model
CSV_COLUMNS = ("path", "video")  # the column of a CSV list of videos


def load_for_prediction(
    model_uri: str,
    tracking_uri: str | None,
    overrides: Sequence[str] = (),
    predict: PredictConfig | None = None,
) -> tuple[VideoClassifier, str]:
    """The classifier of the version `model_uri` names now, and that version's URI. Its registered
    config with `overrides` (`eval.num_crops=1`) decides frames, crops and views; `predict` (or the
    `predict.*` overrides) how to score. The registry is `tracking_uri`, else MLFLOW_TRACKING_URI,
    else the demo's."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEMO_TRACKING_URI
    version = resolve_version(model_uri, uri)
    classifier = load_registered_model(version, tracking_uri=uri)
    if not isinstance(classifier, VideoClassifier):
        raise RegisteredModelNotFoundError(
            f"{model_uri} ({version}) is a pretrained encoder, not a classifier: fine-tune it first "
            f"(--set model.init_from={model_uri}), or ask it for embeddings through MLflow's pyfunc"
        )
    raw = classifier.config.model_dump() | {"predict": predict.model_dump() if predict else {}}
    classifier.config = validate_config(apply_overrides(raw, overrides), model_uri, overrides)
    storage.configure(classifier.config.storage.endpoint_url, classifier.config.storage.region)
    return classifier, version


def _listed(csv_file: Location) -> list[str]:
    """The videos a CSV lists (column `path` or `video`), read as the dataset sources read their CSV
    files; relative ones are relative to its folder."""
    rows = [fields for _, fields, _ in read_csv_rows(csv_file, set())]
    column = next((name for name in CSV_COLUMNS if rows and name in rows[0]), None)
    if rows and column is None:
        raise ValueError(f"{csv_file}: a list of videos needs a column named one of {list(CSV_COLUMNS)}")
    return [
        storage.beside(storage.parent_of(csv_file), fields[column]) for fields in rows if fields.get(column)
    ]


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """The videos to score: a file as it is, a folder or bucket prefix as the videos under it (sorted,
    hidden ones left out), a `.csv` as the videos it lists. A missing one stays, to be reported."""
    where = [location(value) for value in inputs]
    storage.check_buckets(where)  # an unusable bucket is one line at the start, not an error per video
    videos: list[str] = []
    for item in where:
        if str(item).lower().endswith(".csv") and storage.is_file(item):
            videos += _listed(item)
        elif storage.is_folder(item):  # a folder without videos stays, to be reported as one
            videos += [str(file.path) for file in walk(item)[0] if file.is_video] or [str(item)]
        else:
            videos.append(str(item))
    return videos


def print_row(row: pd.Series) -> None:
    """A row as `vidtx predict` prints it: the path and its top classes, or `error: path: why` on stderr."""
    if row["error"] is not None:
        print(f"error: {row['path']}: {row['error']}", file=sys.stderr, flush=True)
        return
    top = zip(row["top_k_labels"], row["top_k_scores"], strict=True)
    where = row["path"]
    if "window" in row:  # scored window by window: which window, or the whole video
        span = "whole video" if pd.isna(row["window"]) else f"window {row['window']}"
        where += f" [{span}: {row['start']:.2f}-{row['end']:.2f} s]"
    lines = [where, *(f"  {score:6.1%}  {label}" for label, score in top)]
    if row["labels"] is not None:  # a multi-label model: the classes at or above its threshold
        lines.append(f"  labels: {', '.join(row['labels']) or 'none'}")
    print("\n".join(lines), flush=True)


def predict_videos(
    classifier: VideoClassifier,
    version: str,
    inputs: Sequence[str],
    on_row: Callable[[pd.Series], object] = lambda row: None,
) -> PredictionSummary:
    """Score the videos of `inputs` with `classifier` (see `load_for_prediction`) as its config's
    `predict` section says, calling `on_row` with each row as it comes."""
    config = classifier.config
    predict = config.predict
    videos = expand_inputs(inputs)
    if not videos:
        raise ValueError(f"no videos to score in {', '.join(inputs)}")
    views = {
        "top_k": predict.top_k,
        "num_clips": config.eval.num_clips,
        "num_crops": config.eval.num_crops,
        "embedding": predict.embeddings,
    }
    if classifier.multi_label:
        views["threshold"] = config.eval.threshold if predict.threshold is None else predict.threshold
    if predict.window:
        views |= {"window": predict.window, "hop": predict.hop or predict.window}
    if predict.ray_address:
        from vidtx.stages.ray_scoring import score_on_ray  # Ray only where it is asked for

        batches = score_on_ray(classifier, videos, views, predict)
    else:
        batches = score_here(classifier, videos, views, predict.batch_size)
    failed = 0
    schema = table_schema(
        classifier.classifier.in_features if predict.embeddings else None,
        windows=predict.window is not None,
        multi_label=classifier.multi_label,
    )
    with table_writer(predict.output, schema) as append:
        for frame in batches:
            append(frame)
            for _, row in frame.iterrows():
                failed += row["error"] is not None and pd.isna(row.get("window"))  # a video, not a window
                on_row(row)
    table = None if predict.output is None else str(predict.output)
    return PredictionSummary(version, len(videos), failed, table)
