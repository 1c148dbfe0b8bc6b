"""`batch-predict`: a registered model over many videos (files, folders, CSV lists, bucket prefixes),
written as a predictions table; in the flow's process, or as a Ray Data job with `predict.ray_address`.

The alias is resolved once, when the flow starts: every video is scored by that one version, which
the flow's artifact names and links to.
"""

from __future__ import annotations

import pandas as pd
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.forms import PredictForm
from vidtx.config import PredictConfig
from vidtx.markdown import markdown_table
from vidtx.results import PredictionSummary
from vidtx.serving.classifier import VideoClassifier
from vidtx.stages.predict import load_for_prediction, predict_videos
from vidtx.tracking.links import model_version_link

SHOWN_ERRORS = 20  # unreadable videos listed in the artifact; the table has them all


@task(retries=2, retry_delay_seconds=10)
def resolve_model(
    model: str, tracking_uri: str | None, overrides: list[str], predict: PredictConfig
) -> tuple[VideoClassifier, str]:
    classifier, version = load_for_prediction(model, tracking_uri, overrides, predict)
    get_run_logger().info("%s is %s", model, version)
    return classifier, version


@task(task_run_name="score with {version}", cache_policy=NO_CACHE)  # a model is no cache key
def score(
    classifier: VideoClassifier, version: str, videos: list[str]
) -> tuple[PredictionSummary, list[tuple[str, str]]]:
    """The videos scored into the table; (its summary, each unreadable video and why)."""
    unreadable: list[tuple[str, str]] = []

    def on_row(row: pd.Series) -> None:
        if row["error"] is not None:
            unreadable.append((row["path"], row["error"]))

    summary = predict_videos(classifier, version, videos, on_row)
    get_run_logger().info(summary.text())
    return summary, unreadable


@flow(name="batch-predict", log_prints=True)
def batch_predict(settings: PredictForm) -> PredictionSummary:
    """Score the videos with the model into the table at `output`; the overrides change the model's
    own config for this run, e.g. `eval.num_crops=1`."""
    classifier, version = resolve_model(
        settings.model, settings.tracking_uri, settings.overrides, settings.predict()
    )
    summary, unreadable = score(classifier, version, settings.videos)
    name, number = version.removeprefix("models:/").split("/")
    lines = [
        "# Batch predictions",
        "",
        f"{summary.text()}.",
        "",
        f"Model: [{name} v{number}]({model_version_link(classifier.config, name, number)}) ({settings.model})",
    ]
    if unreadable:
        lines += ["", markdown_table(["video", "why it could not be read"], unreadable[:SHOWN_ERRORS])]
    create_markdown_artifact("\n".join(lines), key="batch-predictions", description=summary.text())
    return summary
