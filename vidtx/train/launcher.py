"""A Ray Train TorchTrainer around the DeepSpeed loop, on a local Ray or a cluster: what the training
stage (`vidtx.stages.train`) launches once it has checked the config and started the MLflow run."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import ray
from ray.train import (
    CheckpointConfig,
    FailureConfig,
    RunConfig,
    ScalingConfig,
    UserCallback,
    WorkerGroupError,
)
from ray.train.torch import TorchTrainer
from ray.train.v2._internal.callbacks import DatasetsCallback

from vidtx import storage
from vidtx.config import PipelineConfig, TrainConfig
from vidtx.data.shares import UnreadableShardsError
from vidtx.locations import location
from vidtx.processes import sigterm_raises
from vidtx.ray_session import ray_session, worker_env
from vidtx.train.loop import train_loop_per_worker
from vidtx.train.objectives import objective_type
from vidtx.train.payload import WorkerPayload
from vidtx.train.rendezvous import NodeAddressTorchConfig

logger = logging.getLogger(__name__)


def launch(
    payload: WorkerPayload,
    run_name: str,
    storage_path: str,
    address: str | None,
    progress: Callable[[], AbstractContextManager[object]],
    callbacks: Sequence[UserCallback] = (),
) -> ray.train.Result:
    """Run the DeepSpeed loop as a Ray Train TorchTrainer named `run_name` (checkpoints in
    `storage_path/run_name`) on a local Ray (`address` None: started for the run, stopped after) or
    the cluster at `address`, inside `progress()` (the driver following the run's metrics). SIGTERM
    unwinds as `TerminatedError`, with the local Ray shut down."""
    env_vars = worker_env()
    train_cfg = payload.config.train
    with sigterm_raises(), ray_session(address, runtime_env={"env_vars": env_vars} if env_vars else None):
        check_resources(payload.config, autoscaling=address is not None)
        trainer = _build_trainer(payload, run_name, storage_path, callbacks)
        logger.info(
            "training %s: %d workers, checkpoints in %s/%s",
            run_name,
            train_cfg.num_workers,
            storage_path,
            run_name,
        )
        with progress():
            return _fit(trainer)


def _fit(trainer: TorchTrainer) -> ray.train.Result:
    """`trainer.fit()`; damaged shards that a worker could not read are raised as that worker's
    `UnreadableShardsError` (one line naming them), not as Ray's error with every traceback. Ray
    keeps a worker's exception behind a wrapper carrying its traceback text (Ray 2.60: `_base_exc`
    of `ray.train.v2` `UserExceptionWithTraceback`; `tests/test_train.py` notices a change)."""
    try:
        return trainer.fit()
    except WorkerGroupError as err:
        for failure in err.worker_failures.values():
            cause = getattr(failure, "_base_exc", failure)
            if isinstance(cause, UnreadableShardsError):
                raise cause from err
        raise


class _Trainer(TorchTrainer):
    """A TorchTrainer without Ray Data's callback. vidtx hands Ray Train no Ray Datasets (each worker
    reads its shards through webdataset), yet Ray 2.60 starts a `DatasetManager` actor for every run
    regardless: one more process importing Ray Data, about 4 s of CPU per training.
    `tests/test_train.py::test_two_workers_zero2_loss_goes_down` notices when an upgrade changes this."""

    def _create_default_callbacks(self) -> list:
        callbacks = super()._create_default_callbacks()
        return [callback for callback in callbacks if not isinstance(callback, DatasetsCallback)]


def _build_trainer(
    payload: WorkerPayload, run_name: str, storage_path: str, callbacks: Sequence[UserCallback]
) -> TorchTrainer:
    train_cfg = payload.config.train
    # which checkpoints Ray keeps as the best
    score, order = objective_type(payload.objective, payload.config).score
    resources = {"CPU": train_cfg.cpus_per_worker} | ({"GPU": 1} if train_cfg.use_gpu else {})
    run_filesystem, run_path = storage.run_storage(location(storage_path))
    return _Trainer(
        train_loop_per_worker,
        train_loop_config=payload.model_dump(mode="json"),
        torch_config=NodeAddressTorchConfig(),
        scaling_config=ScalingConfig(
            num_workers=train_cfg.num_workers,
            use_gpu=train_cfg.use_gpu,
            resources_per_worker=resources,
            placement_strategy=train_cfg.placement.upper(),
        ),
        run_config=RunConfig(
            name=run_name,
            # vidtx's file systems (`storage.run_storage`): on disk, a run killed while Ray writes its
            # snapshot or a checkpoint resumes from the last whole one; in a bucket, vidtx's retries
            storage_filesystem=run_filesystem,
            storage_path=run_path,
            failure_config=FailureConfig(max_failures=train_cfg.max_failures),
            callbacks=list(callbacks),
            checkpoint_config=CheckpointConfig(
                num_to_keep=train_cfg.keep_checkpoints,
                checkpoint_score_attribute=score if payload.validation else None,  # None: latest
                checkpoint_score_order=order,
            ),
        ),
    )


WANTED_BY = {
    "CPU": "train.num_workers x train.cpus_per_worker",
    "GPU": "train.num_workers with train.use_gpu",
}


def workers_resources(train_cfg: TrainConfig) -> dict[str, float]:
    """What a training's workers take from the Ray cluster together, by resource name."""
    wanted = {"CPU": train_cfg.num_workers * train_cfg.cpus_per_worker}
    if train_cfg.use_gpu:
        wanted["GPU"] = train_cfg.num_workers
    return wanted


def check_resources(config: PipelineConfig, autoscaling: bool) -> None:
    """Fail with a message naming the fields rather than wait forever for a placement group that
    cannot be placed. On a cluster (`autoscaling`) missing resources may still be added by the
    autoscaler, so that is only logged."""
    train_cfg = config.train
    available = ray.cluster_resources()
    wanted = workers_resources(train_cfg)
    problems = [
        f"{WANTED_BY[name]} = {need:g} {name}s, but the Ray cluster has {available.get(name, 0):g} {name}s"
        for name, need in wanted.items()
        if need > available.get(name, 0)
    ]
    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    if train_cfg.placement == "strict_spread" and train_cfg.num_workers > nodes:
        problems.append(
            f"train.placement = strict_spread needs {train_cfg.num_workers} nodes (one per worker), "
            f"but the Ray cluster has {nodes}"
        )
    if problems and not autoscaling:
        raise ValueError("; ".join(problems))
    for problem in problems:
        logger.warning("%s: waiting for the autoscaler", problem)
