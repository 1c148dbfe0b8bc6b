"""MLflow run lifecycle: exactly one run per training run, found again by name after a restart.

The driver (launcher) creates or finds the run before any compute and logs the resolved config as
params; Ray worker rank 0 attaches to that run id and logs metrics. Restarts (a worker dies, the whole
job is started again with the same run name) land in the same run.

A run's source (`mlflow.source.*`: what the UI's Source and Version columns show) is the vidtx
checkout and the `vidtx` command, as an MLflow Project run records them (`vidtx.tracking.run_source`).

A run records the process that drives it (`vidtx.driver`: host, pid and start time). One whose driver
was killed outright (SIGKILL, a lost machine) would stay RUNNING for ever: the next training started
on that host ends it KILLED (`end_orphaned_runs`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import mlflow
import psutil
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, Run
from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT, MLFLOW_PARENT_RUN_ID, MLFLOW_SOURCE_NAME
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

from vidtx.config import ConfigError, PipelineConfig, dump_config
from vidtx.log import adopt_loggers
from vidtx.tracking.run_source import source_tags

logger = logging.getLogger(__name__)

RUN_NAME_TAG = "vidtx.run_name"
CHECKPOINT_TAG = "vidtx.checkpoint"  # the run's latest checkpoint, set when training finishes
BEST_CHECKPOINT_TAG = "vidtx.best_checkpoint"  # its best by validation top-1
DRIVER_TAG = "vidtx.driver"  # "<host> <pid> <start time>" of the process that runs the training
END_REASON_TAG = "vidtx.end_reason"  # why a run was ended by something other than its own process
# MLflow 3's UI opens an experiment without this tag in GenAI mode (an empty Traces page); with it, on
# its runs. The values are the UI's ExperimentKind ("genai_development", "custom_model_development", ...)
EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND = "mlflow.experimentKind", "custom_model_development"


class TrackingUnavailableError(RuntimeError):
    """The MLflow tracking store cannot be reached or written."""


SQLITE = "sqlite:///"


def sqlite_file(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI (relative, or absolute with four slashes), else None."""
    return Path(uri.removeprefix(SQLITE)) if uri.startswith(SQLITE) else None


def resolve_tracking_uri(config: PipelineConfig) -> str:
    """MLFLOW_TRACKING_URI wins, then `tracking.tracking_uri`, then a SQLite file in the workdir."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or config.tracking.tracking_uri
    if uri is None:
        return f"{SQLITE}{(config.workdir / 'mlflow.db').resolve()}"
    if (database := sqlite_file(uri)) is not None and not database.is_absolute():
        return f"{SQLITE}{database.resolve()}"  # Ray workers start elsewhere: pin it to this directory
    return uri


@contextlib.contextmanager
def mlflow_uris(uri: str) -> Iterator[None]:
    """Point MLflow's fluent API (start_run, log_model, register_model, artifacts) at `uri`.

    `mlflow.set_tracking_uri` also exports MLFLOW_TRACKING_URI (and the registry one), which vidtx
    reads as the user's choice: left behind, it would send every later run of this process (a
    Prefect worker, a test session) to this store. The variables are restored when the block ends;
    the fluent API keeps pointing at `uri` (a run started in the block stays usable).
    """
    variables = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")
    saved = {name: os.environ.get(name) for name in variables}
    try:
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def logging_into(client: MlflowClient, run_id: str) -> Iterator[None]:
    """Run `run_id` active in MLflow's fluent API (its `log_model` takes no run id), with the status
    and end time it had: a fluent run is set RUNNING and ended FINISHED, which made a stopped training
    (KILLED) a finished one, and moved its end to when its model was registered."""
    before = client.get_run(run_id).info
    try:
        with mlflow_uris(client.tracking_uri), mlflow.start_run(run_id=run_id):
            yield
    finally:
        if before.end_time is not None:
            client.set_terminated(run_id, before.status, end_time=before.end_time)


def connect(tracking_uri: str) -> MlflowClient:
    """A client for `tracking_uri`, checked with one cheap query so failures surface before compute."""
    if (database := sqlite_file(tracking_uri)) is not None:
        database.parent.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    adopt_loggers()  # MLflow's records go where vidtx's go, also where it was imported after set-up
    try:
        client.search_experiments(max_results=1)
    except Exception as err:
        raise TrackingUnavailableError(f"MLflow tracking store {tracking_uri} is unavailable: {err}") from err
    return client


def artifact_root(client: MlflowClient) -> str | None:
    """Artifacts beside a SQLite store (MLflow's default is ./mlruns of whatever the working dir is)."""
    database = sqlite_file(client.tracking_uri)
    return str(database.parent / "mlartifacts") if database is not None else None  # else the server decides


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"train": {"lr": 0.1}} -> {"train.lr": "0.1"}: MLflow params are flat strings."""
    flat: dict[str, str] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat |= flatten(value, f"{name}.")
        else:
            flat[name] = str(value)[:MAX_PARAM_VAL_LENGTH]
    return flat


def parse_tags(pairs: Sequence[str]) -> dict[str, str]:
    """Run tags given as `KEY=VALUE` (the CLI's --tag); ConfigError names the first malformed one."""
    if bad := [pair for pair in pairs if not pair.partition("=")[0] or "=" not in pair]:
        raise ConfigError(f"--tag {bad[0]}: expected KEY=VALUE")
    return dict(pair.split("=", 1) for pair in pairs)


def find_run(client: MlflowClient, experiment_name: str, run_name: str) -> Run | None:
    """The MLflow run of training run `run_name`, if there is one."""
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return None
    runs = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{RUN_NAME_TAG}` = '{run_name}'", max_results=1
    )
    return runs[0] if runs else None


def training_experiment(client: MlflowClient, name: str) -> str:
    """The id of experiment `name`, created if missing, marked as a model-training experiment.

    An experiment made before vidtx set the mark gets it; a kind someone chose in the UI is kept.
    """
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        return client.create_experiment(
            name, artifact_location=artifact_root(client), tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING_KIND}
        )
    if EXPERIMENT_KIND_TAG not in experiment.tags:
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND)
    return experiment.experiment_id


def start_or_resume_run(
    client: MlflowClient,
    config: PipelineConfig,
    run_name: str,
    tags: Mapping[str, str] | None = None,
    *,
    entry_point: str = "train",
) -> str:
    """The id of the MLflow run named `run_name` in the config's experiment, created if missing.

    A new run records the whole config as params (flattened) and as `config.yaml`, which `vidtx`
    loads back. It gets lineage tags too, and the source tags (`source_tags`: `entry_point` is the
    `vidtx` command that runs it).
    An existing run is reopened (status RUNNING) and only gets the new tags: params are immutable.
    Its source is kept where this process knows no commit (a Ray Job's `vidtx train` runs from an
    installed vidtx, and the submitter's checkout set it).
    """
    source = source_tags(entry_point)
    lineage = {RUN_NAME_TAG: run_name, DRIVER_TAG: _process_identity(psutil.Process()), **(tags or {})}
    if existing := find_run(client, config.tracking.experiment, run_name):
        if MLFLOW_GIT_COMMIT in source or MLFLOW_SOURCE_NAME not in existing.data.tags:
            lineage = source | lineage
        run_id = existing.info.run_id
        client.update_run(run_id, status="RUNNING")
        for key, value in lineage.items():
            client.set_tag(run_id, key, value)
        logger.info("resuming MLflow run %s (%s)", run_id, run_name)
        return run_id
    experiment_id = training_experiment(client, config.tracking.experiment)
    run = client.create_run(experiment_id, run_name=run_name, tags=source | lineage)
    params = [Param(key, value) for key, value in flatten(config.model_dump(mode="json")).items()]
    for start in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
        client.log_batch(run.info.run_id, params=params[start : start + MAX_PARAMS_TAGS_PER_BATCH])
    client.log_text(run.info.run_id, dump_config(config), "config.yaml")
    logger.info("created MLflow run %s (%s)", run.info.run_id, run_name)
    return run.info.run_id


def log_metrics(client: MlflowClient, run_id: str, metrics: Mapping[str, float], step: int) -> None:
    """`metrics` (name -> value) into run `run_id` at `step`, stamped now, in one request."""
    now = int(time.time() * 1000)
    client.log_batch(
        run_id, metrics=[Metric(name, float(value), now, step) for name, value in metrics.items()]
    )


def last_logged_step(client: MlflowClient, run_id: str, metric: str) -> int:
    """Highest step already logged for `metric` (-1 if none): a resumed run does not log a step twice."""
    history = client.get_metric_history(run_id, metric)
    return max((point.step for point in history), default=-1)


def _process_identity(process: psutil.Process) -> str:
    """ "<host> <pid> <start time>": a pid alone is reused."""
    return f"{socket.gethostname()} {process.pid} {process.create_time():.2f}"


def _is_alive(driver: str) -> bool:
    """Whether the process a DRIVER_TAG names still runs (on this host)."""
    try:
        pid = int(driver.split(" ")[1])
    except (IndexError, ValueError):
        return True  # not a tag this module wrote: nothing to tell
    try:
        return _process_identity(psutil.Process(pid)) == driver
    except psutil.NoSuchProcess:
        return False


def _parent_alive(client: MlflowClient, run: Run) -> bool:
    """Whether `run` is nested under a run whose driver still lives."""
    parent_id = run.data.tags.get(MLFLOW_PARENT_RUN_ID)
    return parent_id is not None and _is_alive(client.get_run(parent_id).data.tags.get(DRIVER_TAG, ""))


def end_orphaned_runs(client: MlflowClient, experiment_name: str) -> list[str]:
    """End as KILLED the experiment's RUNNING runs whose driver was a process of this host that no
    longer exists; their ids. Runs driven from other hosts are left alone: nothing here can tell.

    A run nested under a parent (a sweep's trial) belongs to its parent's driver while that lives: a
    trial its scheduler stopped has lost its process, and the sweep's driver ends its run, saying
    why. (A trial starting beside it used to end it first, as "its process is gone".)"""
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return []
    ended = []
    for run in client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'"):
        driver = run.data.tags.get(DRIVER_TAG, "")
        if driver.split(" ")[0] != socket.gethostname() or _is_alive(driver) or _parent_alive(client, run):
            continue
        client.set_tag(run.info.run_id, END_REASON_TAG, f"its process ({driver}) is gone")
        client.set_terminated(run.info.run_id, status="KILLED")
        logger.warning(
            "MLflow run %s (%s) was left RUNNING by a process that is gone: ended as KILLED",
            run.info.run_id,
            run.info.run_name,
        )
        ended.append(run.info.run_id)
    return ended
