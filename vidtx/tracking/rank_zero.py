"""Metric logging from Ray worker rank 0 into the training run's MLflow run."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

from vidtx.tracking.runs import connect, last_logged_step, log_metrics

logger = logging.getLogger(__name__)

STEP_METRIC = "train/loss"  # logged at every log step: its history tells where a resumed run left off


class RankZeroMetrics:
    """Logs into an existing MLflow run on rank 0 (no-op on other ranks), with system metrics.

    After a restart the loop replays the steps since the last checkpoint; steps that were already logged
    keep their first value, so the run's history has one point per step.

    The run's status belongs to the driver, which knows how the training ended (FINISHED, KILLED,
    FAILED), so nothing here writes it: every call names the run, none goes through MLflow's fluent
    run. (Its `start_run(run_id=...)` sets a run RUNNING, its `end_run` sets a status, and its exit
    handler ends the active run FINISHED: a trial that a sweep's scheduler stopped shut its workers
    down after the driver had ended its run KILLED, and its `end_run` put it back to RUNNING.)
    """

    def __init__(self, rank: int, tracking_uri: str, run_id: str) -> None:
        self.enabled = rank == 0
        self.skip_through = -1
        if not self.enabled:
            return
        self.run_id = run_id
        self.client = connect(tracking_uri)
        self.skip_through = last_logged_step(self.client, run_id, STEP_METRIC)
        self.system_metrics = SystemMetricsMonitor(run_id, resume_logging=True, tracking_uri=tracking_uri)
        self.system_metrics.start()
        if self.skip_through >= 0:
            logger.info(
                "MLflow already has steps up to %d; replayed steps are not logged again", self.skip_through
            )

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self.enabled and step > self.skip_through:
            self.log_always(metrics, step)

    def log_always(self, metrics: dict[str, float], step: int) -> None:
        """Log events that may repeat a step (e.g. a restart at a step already logged)."""
        if self.enabled:
            log_metrics(self.client, self.run_id, metrics, step)

    def log_text(self, text: str, artifact_file: str) -> None:
        """A text artifact of the run (rank 0)."""
        if self.enabled:
            self.client.log_text(self.run_id, text, artifact_file)

    def log_artifacts(self, folder: Path, artifact_path: str) -> None:
        """The files of `folder` as artifacts under `artifact_path` (rank 0)."""
        if self.enabled:
            self.client.log_artifacts(self.run_id, str(folder), artifact_path)

    def log_image(self, image: np.ndarray, artifact_file: str) -> None:
        """An image artifact of the run, uint8 (H, W, 3) (rank 0)."""
        if self.enabled:
            self.client.log_image(self.run_id, image, artifact_file=artifact_file)

    def close(self) -> None:
        """Stop the system metrics (their last samples logged); the run's status is left as it is."""
        if self.enabled:
            self.system_metrics.finish()
