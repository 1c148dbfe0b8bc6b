"""Metric logging from Ray worker rank 0 into the training run's MLflow run."""

from __future__ import annotations

import logging
from pathlib import Path

import mlflow
import numpy as np

from vidtx.tracking.runs import connect, last_logged_step, mlflow_uris

logger = logging.getLogger(__name__)

STEP_METRIC = "train/loss"  # logged at every log step: its history tells where a resumed run left off


class RankZeroMetrics:
    """Attaches to an existing MLflow run on rank 0 (no-op on other ranks), with system metrics.

    After a restart the loop replays the steps since the last checkpoint; steps that were already logged
    keep their first value, so the run's history has one point per step.

    The run's status belongs to the driver, which knows how the training ended (FINISHED, KILLED,
    FAILED): `close` leaves it RUNNING. (MLflow's `end_run` defaults to FINISHED: called from the
    loop's `finally` when a stopped training shut its workers down, it raced the driver's KILLED.)
    """

    def __init__(self, rank: int, tracking_uri: str, run_id: str) -> None:
        self.enabled = rank == 0
        self.skip_through = -1
        if not self.enabled:
            return
        client = connect(tracking_uri)
        self.skip_through = last_logged_step(client, run_id, STEP_METRIC)
        with mlflow_uris(tracking_uri):
            mlflow.start_run(run_id=run_id, log_system_metrics=True)
        if self.skip_through >= 0:
            logger.info(
                "MLflow already has steps up to %d; replayed steps are not logged again", self.skip_through
            )

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.enabled and step > self.skip_through:
            mlflow.log_metrics(metrics, step=step)

    def log_always(self, metrics: dict[str, float], step: int) -> None:
        """Log events that may repeat a step (e.g. a restart at a step already logged)."""
        if self.enabled:
            mlflow.log_metrics(metrics, step=step)

    def log_text(self, text: str, artifact_file: str) -> None:
        """A text artifact of the run (rank 0)."""
        if self.enabled:
            mlflow.log_text(text, artifact_file)

    def log_artifacts(self, folder: Path, artifact_path: str) -> None:
        """The files of `folder` as artifacts under `artifact_path` (rank 0)."""
        if self.enabled:
            mlflow.log_artifacts(str(folder), artifact_path)

    def log_image(self, image: np.ndarray, artifact_file: str) -> None:
        """An image artifact of the run, uint8 (H, W, 3) (rank 0)."""
        if self.enabled:
            mlflow.log_image(image, artifact_file)

    def close(self) -> None:
        """Stop the system metrics and detach from the run, which stays RUNNING for the driver to end."""
        if self.enabled:
            mlflow.end_run(status="RUNNING")
