"""The typed messages at training's process boundaries.

`WorkerPayload` goes from the driver to every Ray Train worker. `TrainResult` comes back to whoever
started the run; a run submitted as a Ray Job writes it into the run's storage folder
(`<storage>/<run name>/vidtx-result.json`, through the same pyarrow file systems Ray Train uses), where
the submitter reads it when the job has ended.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from vidtx import storage
from vidtx.config import Objective, PipelineConfig
from vidtx.locations import location

RESULT_FILE = "vidtx-result.json"


class WorkerPayload(BaseModel):
    """What every Ray Train worker receives: the resolved config (absolute paths), the MLflow run
    that rank 0 logs into, whether to validate (False: the shards have no `data.val_split`) and what
    the run learns (`vidtx.train.objectives`)."""

    config: PipelineConfig
    tracking_uri: str
    mlflow_run_id: str
    validation: bool = True
    objective: Objective = "classification"


class TrainResult(BaseModel):
    """What a finished training run hands to the evaluation stage."""

    run_name: str
    storage_path: str  # local folder or URI that holds `<run_name>/`
    checkpoint: str | None  # latest checkpoint directory (path or URI)
    best_checkpoint: str | None  # best by validation top-1
    metrics: dict[str, Any]  # the last metrics reported to Ray Train
    mlflow_run_id: str
    tracking_uri: str

    def summary(self) -> str:
        """What `vidtx train` prints."""
        metrics = ", ".join(
            f"{key} {value:.4g}" for key, value in self.metrics.items() if isinstance(value, float)
        )
        return "\n".join(
            [
                f"run:         {self.run_name} (resume with --set train.run_name={self.run_name})",
                f"checkpoints: {run_folder(self.storage_path, self.run_name)}",
                f"  latest:    {self.checkpoint}",
                f"  best:      {self.best_checkpoint}",
                f"MLflow:      run {self.mlflow_run_id} at {self.tracking_uri}",
                f"metrics:     {metrics}",
            ]
        )

    def save(self) -> str:
        """Write the result into the run's storage folder; returns where."""
        where = result_file(self.storage_path, self.run_name)
        with storage.staged(location(where)) as file:
            file.write_text(self.model_dump_json(indent=2))
        return where

    @staticmethod
    def exists(storage_path: str, run_name: str) -> bool:
        """Whether run `run_name` saved its result (it finished)."""
        return storage.is_file(location(result_file(storage_path, run_name)))

    @classmethod
    def load(cls, storage_path: str, run_name: str) -> TrainResult:
        """The result a run wrote with `save`; FileNotFoundError when it wrote none."""
        if not cls.exists(storage_path, run_name):
            raise FileNotFoundError(f"{result_file(storage_path, run_name)}: no such file")
        return cls.model_validate_json(storage.read_text(location(result_file(storage_path, run_name))))


def result_file(storage_path: str, run_name: str) -> str:
    """Where run `run_name` saves its `TrainResult`."""
    return f"{run_folder(storage_path, run_name)}/{RESULT_FILE}"


def storage_location(storage_path: str) -> str:
    """Bucket URLs pass through; local paths (and file:// URLs) become absolute (Ray requires it)."""
    return str(storage.absolute(location(storage_path)))


def checkpoint_uri(storage_path: str, path: str) -> str:
    """A checkpoint as later stages can open it: Ray reports paths inside the storage's pyarrow file
    system (`bucket/run/checkpoint-...` for s3://bucket), which lose the scheme; a bucket's get it
    back (`ray.train.Checkpoint(uri)` picks the file system from it). Local paths stay paths."""
    return storage.with_scheme(path, storage_location(storage_path))


def run_folder(storage_path: str, run_name: str) -> str:
    return f"{storage_location(storage_path).rstrip('/')}/{run_name}"
