"""The training stage: `train(config) -> TrainResult`, from the checks to the finished MLflow run.

Where it runs is decided by `RAY_ADDRESS` (or `train.cluster.address`):
- unset: a local Ray instance is started for the run (and stopped after);
- `http(s)://head:8265`: the run is submitted to that cluster as a Ray Job (`vidtx.train.jobs`);
- anything else (`auto`, `host:6379`, what Ray sets inside a Ray Job): connect and run the trainer
  (`vidtx.train.launcher`).

A run is identified by its name and storage path: starting `train` again with the same ones resumes
from the latest checkpoint and logs into the same MLflow run.
"""

from __future__ import annotations

import datetime
import functools
import os
from collections.abc import Mapping, Sequence

import ray
from ray.train import UserCallback

from vidtx import storage
from vidtx.config import ConfigError, PipelineConfig
from vidtx.locations import location
from vidtx.model_factory import check_model_config, check_pretrain_config
from vidtx.processes import stopped_from_outside
from vidtx.ray_session import is_jobs_api
from vidtx.tracking.datasets import log_dataset_inputs
from vidtx.tracking.lineage import INIT_FROM_TAG, MANIFEST_HASH_TAG, OBJECTIVE_TAG
from vidtx.tracking.model_registry import resolve_version
from vidtx.tracking.runs import (
    BEST_CHECKPOINT_TAG,
    CHECKPOINT_TAG,
    connect,
    end_orphaned_runs,
    resolve_tracking_uri,
    start_or_resume_run,
)
from vidtx.train.engine import unmatched_patterns
from vidtx.train.jobs import COMMANDS, submit_training_job
from vidtx.train.launcher import launch
from vidtx.train.payload import Objective, TrainResult, WorkerPayload, checkpoint_uri, storage_location
from vidtx.train.progress import ProgressCallback, follow_progress
from vidtx.train.splits import training_splits
from vidtx.train.starting_weights import check_starting_weights


def default_run_name(config: PipelineConfig) -> str:
    return f"{config.name}-{datetime.datetime.now():%Y%m%d-%H%M%S}"


def train(
    config: PipelineConfig,
    *,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    progress: ProgressCallback | None = None,
    callbacks: Sequence[UserCallback] = (),
    objective: Objective = "classification",
) -> TrainResult:
    """Train `config` for `objective` (`vidtx.train.objectives`); the same `run_name` + storage path
    resumes an earlier run. `callbacks` go to the Ray Train run (a sweep's trial passes Ray Tune's,
    which hands each report to the Tuner)."""
    network = check_model_config(config)  # a bad preset or option fails here, before anything starts
    autoencoder = check_pretrain_config(config) if objective == "masked_autoencoding" else None
    check_starting_weights(config, network, autoencoder)  # model.init_from, model.checkpoint: before Ray
    if unmatched := unmatched_patterns(network, config.train.freeze):
        raise ConfigError(
            f"train.freeze: {', '.join(map(repr, unmatched))} freezes no parameter of {config.model.name} "
            "(names as in timm's ViT: patch_embed.*, cls_token, pos_embed, blocks.<i>.*, norm.*, head.*)"
        )
    run_name = run_name or config.train.run_name or default_run_name(config)
    address = os.environ.get("RAY_ADDRESS") or config.train.cluster.address
    if is_jobs_api(address):
        return submit_training_job(config, run_name, address, tags, progress, objective)
    return _train_on_ray(config, run_name, address, tags or {}, progress, callbacks, objective)


def _train_on_ray(
    config: PipelineConfig,
    run_name: str,
    address: str | None,
    tags: Mapping[str, str],
    progress: ProgressCallback | None,
    callbacks: Sequence[UserCallback],
    objective: Objective,
) -> TrainResult:
    train_cfg = config.train
    labeled = objective == "classification"  # pretraining reads unlabeled shards too
    data, validation = training_splits(config.data, labeled)  # before the tracking store is created
    if labeled and data.multi_label and config.model.task != "multi_label":  # not a worker's traceback
        raise ConfigError(
            f"model.task {config.model.task}: the training data ({config.data.shards}) holds label sets "
            "(sharded multi-label); set model.task=multi_label"
        )
    tracking_uri = resolve_tracking_uri(config)
    client = connect(tracking_uri)  # a dead tracking store fails here, before any compute
    lineage = {
        MANIFEST_HASH_TAG: data.content_hash,
        "ray.run_name": run_name,
        OBJECTIVE_TAG: objective,
        **tags,
    }
    if where := config.model.init_from:  # where the starting weights came from: a version, not an alias
        lineage[INIT_FROM_TAG] = (
            resolve_version(where, tracking_uri) if where.startswith("models:/") else where
        )
    end_orphaned_runs(client, config.tracking.experiment)
    run_id = start_or_resume_run(client, config, run_name, lineage, entry_point=COMMANDS[objective])
    splits = [("training", source.shards, source.manifest) for source in data.sources]
    if validation is not None:
        splits.append(("validation", config.data.shards, validation))
    log_dataset_inputs(client, run_id, splits)

    storage_path = storage_location(train_cfg.storage_path)
    storage.check(location(storage_path))  # an unusable bucket is one line now, not a Ray error later
    storage.make_folder(location(storage_path))
    payload = WorkerPayload(
        config=config.with_absolute_paths(),
        tracking_uri=tracking_uri,
        mlflow_run_id=run_id,
        validation=validation is not None,
        objective=objective,
    )
    following = functools.partial(follow_progress, client, run_id, train_cfg.max_steps, progress)
    try:  # SIGTERM unwinds too: the local Ray is shut down and the run ended KILLED
        result = launch(payload, run_name, storage_path, address, following, callbacks)
    except BaseException as err:  # stopped from outside (SIGTERM, Ctrl-C, a Prefect cancellation): KILLED
        stopped = stopped_from_outside(err)
        if client.get_run(run_id).info.status == "RUNNING":  # else ended already by what stopped it
            client.set_terminated(run_id, status="KILLED" if stopped else "FAILED")
        if stopped:
            ray_state = "Ray shut down" if not ray.is_initialized() else "Ray left running (not started here)"
            err.add_note(
                f"training {run_name} stopped: {ray_state}, MLflow run {run_id} ended KILLED, "
                f"checkpoints kept in {storage_path}/{run_name}"
            )
        raise
    best = result.best_checkpoints[-1][0] if result.best_checkpoints else None
    for tag, checkpoint in {CHECKPOINT_TAG: result.checkpoint, BEST_CHECKPOINT_TAG: best}.items():
        if checkpoint is not None:
            client.set_tag(run_id, tag, checkpoint_uri(storage_path, checkpoint.path))
    client.set_terminated(run_id, status="FINISHED")
    trained = TrainResult(
        run_name=run_name,
        storage_path=storage_path,
        checkpoint=checkpoint_uri(storage_path, result.checkpoint.path) if result.checkpoint else None,
        best_checkpoint=checkpoint_uri(storage_path, best.path) if best else None,
        metrics=dict(result.metrics or {}),
        mlflow_run_id=run_id,
        tracking_uri=tracking_uri,
    )
    trained.save()  # for a submitter waiting on this run as a Ray Job
    return trained
