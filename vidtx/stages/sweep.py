"""The sweep stage: Ray Tune over the Ray Train trainer, one MLflow parent run with a child per trial,
the best trial evaluated and registered under the registry's rules (a pretraining sweep's best trial:
its encoder registered, as `vidtx pretrain` registers one).

`run_sweep(config)` validates every value of `sweep.space` against the schema and the model zoo, then
runs a Tuner whose trials are `sweep_trial.run_trial` (each a multi-worker DeepSpeed training of the
config with the trial's values). ASHA stops weak trials at its rungs (`sweep.scheduler`); as many
trials run at once as the Ray cluster fits (`train.num_workers` x `cpus_per_worker`, GPUs), at most
`sweep.max_concurrent`. Tune's experiment lives in `<train.storage_path>/<sweep name>`: the same
sweep started again is restored from it (`Tuner.restore`), finished trials kept, unfinished ones
resumed from their checkpoints, under the same parent run.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
from typing import Any

import ray
import ray.tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler
from ray.tune.search import BasicVariantGenerator

from vidtx import storage
from vidtx.config import ConfigError, Distribution, PipelineConfig
from vidtx.locations import location
from vidtx.model_factory import check_model_config, check_pretrain_config
from vidtx.processes import sigterm_raises, stopped_from_outside
from vidtx.ray_session import is_jobs_api, ray_session, tune_trial_environment, worker_env
from vidtx.stages.sweep_result import SweepResult, trial_rows
from vidtx.stages.sweep_trial import SweepPlan, TrialEnds, run_trial
from vidtx.tracking.runs import connect, end_orphaned_runs, resolve_tracking_uri
from vidtx.tracking.sweeps import start_sweep_run
from vidtx.train.launcher import check_resources, workers_resources
from vidtx.train.objectives import objective_type
from vidtx.train.payload import storage_location
from vidtx.train.splits import training_splits

logger = logging.getLogger(__name__)

# A trial's own actor only waits on its Ray Train run: it reserves a sliver of a CPU, so that the
# trials' drivers do not take the CPUs their training workers need (Tune's default is a whole one).
TRIAL_DRIVER_CPUS = 0.01
TUNE_KINDS = {
    "loguniform": lambda values: ray.tune.loguniform(*values),
    "uniform": lambda values: ray.tune.uniform(*values),
    "randint": lambda values: ray.tune.randint(values[0], values[1] + 1),  # Tune's upper end is excluded
    "choice": ray.tune.choice,
    "grid": ray.tune.grid_search,
}


def default_sweep_name(config: PipelineConfig) -> str:
    return f"{config.name}-sweep-{datetime.datetime.now():%Y%m%d-%H%M%S}"


def check_space(config: PipelineConfig) -> None:
    """What the schema cannot check: every model a trial may build exists in the zoo (its preset and
    options), and a pretraining's masked autoencoder can wrap it; ASHA's grace period fits in the
    training; the compared metric is one the trials report. ConfigError names the key and the value."""
    sweep = config.sweep
    reported = objective_type(sweep.objective, config).score[0]
    if sweep.metric not in (reported, "val_loss"):
        raise ConfigError(
            f"sweep.metric {sweep.metric}: the trials report {reported} and val_loss "
            f"(model.task {config.model.task}); set sweep.metric={reported}"
        )
    check = check_pretrain_config if config.sweep.objective == "masked_autoencoding" else check_model_config
    check(config)
    scheduler, max_steps = config.sweep.scheduler, config.train.max_steps
    if scheduler.name == "asha" and scheduler.grace_steps > max_steps:
        raise ConfigError(
            f"sweep.scheduler.grace_steps {scheduler.grace_steps} is more than train.max_steps {max_steps}: "
            "ASHA would never compare the trials; lower the grace steps or set sweep.scheduler.name=none"
        )
    if not config.sweep.space:
        raise ConfigError("sweep.space: empty; name the settings to search, e.g. train.optimizer.lr")
    for key, distribution in config.sweep.space.items():  # data.num_frames builds another model too
        for value in distribution.candidates():
            try:
                check(config.for_trial({key: value}))
            except (ConfigError, ValueError) as err:
                raise ConfigError(f"sweep.space.{key}: {value!r}: {err}") from None


def param_space(space: dict[str, Distribution]) -> dict[str, Any]:
    """The space as Ray Tune's search space (keys stay dotted config keys)."""
    return {key: TUNE_KINDS[dist.kind](list(dist.values)) for key, dist in space.items()}


def run_sweep(config: PipelineConfig) -> SweepResult:
    """Run (or resume: the same `sweep.name`) the sweep of `config`; the best trial evaluated and
    registered. Every value of the space is checked before anything starts."""
    check_space(config)
    sweep_name = config.sweep.name or default_sweep_name(config)
    address = os.environ.get("RAY_ADDRESS") or config.train.cluster.address
    if is_jobs_api(address):
        raise ConfigError(
            f"RAY_ADDRESS / train.cluster.address {address}: a sweep joins its cluster (auto, host:port); "
            "to run it there, submit `vidtx sweep` as a Ray Job"
        )
    if not training_splits(config.data, labeled=config.sweep.objective == "classification")[1]:
        raise ConfigError(
            f"data.val_split {config.data.val_split!r}: a sweep compares its trials on validation, and the "
            f"shards in {config.data.shards} have no such split"
        )
    tracking_uri = resolve_tracking_uri(config)
    client = connect(tracking_uri)  # a dead tracking store fails here, before any compute
    end_orphaned_runs(client, config.tracking.experiment)
    parent_run_id = start_sweep_run(client, config, sweep_name)
    storage_path = storage_location(config.train.storage_path)
    storage.check(location(storage_path))
    plan = SweepPlan(
        config=config.with_absolute_paths(),
        sweep_name=sweep_name,
        parent_run_id=parent_run_id,
        tracking_uri=tracking_uri,
    )
    env_vars = worker_env()
    try:  # SIGTERM unwinds too: the local Ray is shut down, the parent run ended KILLED
        with (
            sigterm_raises(),
            ray_session(address, runtime_env={"env_vars": env_vars} if env_vars else None),
            tune_trial_environment(),
        ):
            check_resources(config, autoscaling=address is not None)
            grid = build_tuner(plan, storage_path, autoscaling=address is not None).fit()
    except BaseException as err:
        stopped = stopped_from_outside(err)
        client.set_terminated(parent_run_id, status="KILLED" if stopped else "FAILED")
        if stopped:
            err.add_note(
                f"sweep {sweep_name} stopped: MLflow run {parent_run_id} ended KILLED, trials' checkpoints "
                f"kept in {storage_path}; the same sweep name resumes it"
            )
        raise
    return SweepResult.conclude(plan, trial_rows(plan, grid, client), client)


def build_tuner(plan: SweepPlan, storage_path: str, autoscaling: bool) -> ray.tune.Tuner:
    """A new Tuner for the sweep, or the one its experiment folder holds (a sweep started again)."""
    sweep = plan.config.sweep
    trainable = ray.tune.with_resources(
        ray.tune.with_parameters(run_trial, plan=plan.model_dump(mode="json")), {"CPU": TRIAL_DRIVER_CPUS}
    )
    experiment = f"{storage_path.rstrip('/')}/{plan.sweep_name}"
    if ray.tune.Tuner.can_restore(experiment):
        logger.info("resuming sweep %s from %s", plan.sweep_name, experiment)
        return ray.tune.Tuner.restore(experiment, trainable, resume_unfinished=True, resume_errored=True)
    concurrency = max_concurrent(plan.config, autoscaling)
    logger.info("sweep %s: %d at a time; Tune's state in %s", plan.sweep_name, concurrency, experiment)
    return ray.tune.Tuner(
        trainable,
        param_space=param_space(sweep.space),
        tune_config=ray.tune.TuneConfig(
            metric=sweep.metric,
            mode=sweep.mode,
            num_samples=sweep.num_trials,
            scheduler=_scheduler(plan.config),
            # the limit goes to the generator: Tune ignores max_concurrent_trials beside one (Ray 2.60)
            search_alg=BasicVariantGenerator(random_state=sweep.seed, max_concurrent=concurrency),
        ),
        run_config=ray.tune.RunConfig(
            name=plan.sweep_name,
            storage_path=storage_path,
            failure_config=ray.tune.FailureConfig(max_failures=0),  # Ray Train retries its workers itself
            callbacks=[TrialEnds(plan, sweep.scheduler.name)],
        ),
    )


def _scheduler(config: PipelineConfig) -> TrialScheduler:
    scheduler = config.sweep.scheduler
    if scheduler.name == "none":
        return FIFOScheduler()
    return ASHAScheduler(
        time_attr="step",
        max_t=config.train.max_steps,
        grace_period=scheduler.grace_steps,
        reduction_factor=scheduler.reduction_factor,
        stop_last_trials=False,  # a trial at its last step ends itself: its run and result recorded
    )


def max_concurrent(config: PipelineConfig, autoscaling: bool = False) -> int:
    """`sweep.max_concurrent`, at most the trials whose training workers the Ray cluster holds at once
    (Ray's guidance for Train runs inside Tune: a trial waiting for its workers only adds load).
    ValueError names the fields where not one trial fits (on a cluster the autoscaler may add nodes)."""
    resources, per_trial = ray.cluster_resources(), workers_resources(config.train)
    per_trial["CPU"] += TRIAL_DRIVER_CPUS
    fits = min(math.floor(resources.get(name, 0) / need + 1e-9) for name, need in per_trial.items())
    if fits == 0 and not autoscaling:
        needs = ", ".join(f"{need:g} {name}s" for name, need in per_trial.items())
        has = ", ".join(f"{resources.get(name, 0):g} {name}s" for name in per_trial)
        raise ValueError(
            f"a trial needs {needs} (train.num_workers x train.cpus_per_worker, and {TRIAL_DRIVER_CPUS} "
            f"CPUs for its driver), but the Ray cluster has {has}: lower train.cpus_per_worker "
            "(e.g. 0.99) or train.num_workers"
        )
    return max(1, min(fits, config.sweep.max_concurrent or fits))
