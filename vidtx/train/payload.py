"""The typed messages at training's process boundaries.

`WorkerPayload` goes from the driver to every Ray Train worker. `TrainResult` comes back to whoever
started the run; a run submitted as a Ray Job writes it into the run's storage folder
(`<storage>/<run name>/vidtx-result.json`, through the same pyarrow file systems Ray Train uses), where
the submitter reads it when the job has ended.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pyarrow import fs
from pydantic import BaseModel

from vidtx.config import PipelineConfig

RESULT_FILE = "vidtx-result.json"


class WorkerPayload(BaseModel):
    """What every Ray Train worker receives: the resolved config (absolute paths), the MLflow run
    that rank 0 logs into, and whether to validate (False: the shards have no `data.val_split`)."""

    config: PipelineConfig
    tracking_uri: str
    mlflow_run_id: str
    validation: bool = True


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
        filesystem, folder = fs.FileSystem.from_uri(run_folder(self.storage_path, self.run_name))
        filesystem.create_dir(folder, recursive=True)
        with filesystem.open_output_stream(f"{folder}/{RESULT_FILE}") as stream:
            stream.write(self.model_dump_json(indent=2).encode())
        return f"{run_folder(self.storage_path, self.run_name)}/{RESULT_FILE}"

    @classmethod
    def load(cls, storage_path: str, run_name: str) -> TrainResult:
        """The result a run wrote with `save`; FileNotFoundError when it wrote none."""
        filesystem, folder = fs.FileSystem.from_uri(run_folder(storage_path, run_name))
        path = f"{folder}/{RESULT_FILE}"
        if filesystem.get_file_info(path).type == fs.FileType.NotFound:
            raise FileNotFoundError(f"{run_folder(storage_path, run_name)}: no {RESULT_FILE}")
        with filesystem.open_input_stream(path) as stream:
            return cls.model_validate_json(stream.read())


def storage_location(storage_path: str) -> str:
    """Object-store URIs pass through; local paths become absolute (Ray requires it)."""
    if "://" in storage_path:
        return storage_path
    return str(Path(storage_path).expanduser().absolute())


def checkpoint_uri(storage_path: str, path: str) -> str:
    """A checkpoint as later stages can open it: Ray reports paths inside the storage's pyarrow file
    system (`bucket/run/checkpoint-...` for s3://bucket), which lose the scheme; a URI storage gets its
    scheme back (`ray.train.Checkpoint(uri)` picks the file system from it). Local paths stay paths."""
    storage = storage_location(storage_path)
    if "://" not in storage or "://" in path:
        return path
    scheme, root = storage.split("://", 1)
    if not path.startswith(root.rstrip("/")):  # a file system whose paths are not the URI's (hdfs://host/...)
        return path
    return f"{scheme}://{path}"


def run_folder(storage_path: str, run_name: str) -> str:
    return f"{storage_location(storage_path).rstrip('/')}/{run_name}"


# Not credentials: those come from each node's own environment (or its instance role), never from a
# runtime environment that Ray shows in its dashboard.
WORKER_ENV_VARS = (
    *("MLFLOW_TRACKING_URI", "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR"),
    *("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION"),
)


def worker_env() -> dict[str, str]:
    """The variables of this process that Ray workers (local or in a Ray Job) must see too."""
    return {name: os.environ[name] for name in WORKER_ENV_VARS if name in os.environ}
