"""Writing a planned dataset's shards with an executor (the steps around it: `vidtx.stages.shard`).

The executor (`shard.executor`) decides where the `write_shard` calls run:

* `processes`: a process pool on this machine (`shard.processes` workers).
* `ray`: one Ray task per shard on a Ray cluster, each reserving `shard.cpus_per_task` CPUs so that
  re-encodes do not oversubscribe a node. A task whose node is lost is run again on another one by
  Ray (`NODE_LOSS_RETRIES`); `write_shard` is idempotent and a bucket only ever holds whole objects,
  so the shard is written once. The output (and the sources) must be somewhere every node reaches: a
  bucket, or a path they share.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from multiprocessing import current_process

from vidtx import storage
from vidtx.config import ShardConfig
from vidtx.log import setup_logging, track
from vidtx.processes import forkserver_context, sigterm_raises
from vidtx.ray_session import is_jobs_api, ray_session, worker_env
from vidtx.shard.plan import ShardSpec
from vidtx.shard.writer import ShardingError, ShardResult, stats_path, write_shard
from vidtx.storage import join

# Ray runs a task again when its worker or node dies (not when it raises): a lost node costs a shard
# its write, at most this many times, before the job fails.
NODE_LOSS_RETRIES = 3


def write_shards(specs: list[ShardSpec], cfg: ShardConfig) -> list[ShardResult]:
    """Write every planned shard with `cfg.executor`. SIGTERM stops it as
    `vidtx.processes.TerminatedError` with every child (or task) stopped; a failure (an OSError: a
    full disk) leaves no temporary file."""
    try:
        with sigterm_raises():
            return write_on_ray(specs, cfg) if cfg.executor == "ray" else _write_in_processes(specs, cfg)
    except BaseException:
        # A worker removes its own on an error, but workers terminated with the pool cannot.
        for spec in specs:
            for path in (join(cfg.output, spec.name), stats_path(cfg, spec)):
                storage.remove_partial(path)
        raise


def _start_worker() -> None:
    # A Pool marks its workers daemonic, which forbids children; each worker probes in a child of
    # its own (killed on a timeout, dying with the worker), so this one is not a daemon.
    current_process().daemon = False
    setup_logging()  # the parent's verbosity and log file, from the environment


def _write_in_processes(specs: list[ShardSpec], cfg: ShardConfig) -> list[ShardResult]:
    write = partial(write_shard, cfg=cfg)
    if cfg.processes == 1:
        return [write(spec) for spec in track(specs, "shards", total=len(specs))]
    # forkserver: workers start clean (no decoder or thread state inherited). A Pool rather than a
    # ProcessPoolExecutor: leaving the block (on `TerminatedError` too) terminates the workers at
    # once instead of waiting for their shards.
    with forkserver_context(__name__).Pool(cfg.processes, _start_worker) as pool:
        return list(track(pool.imap_unordered(write, specs), "shards", total=len(specs)))


def ray_cluster(cfg: ShardConfig) -> str | None:
    """The address `ray_session` joins: `shard.ray_address`, else RAY_ADDRESS or a local Ray (None).
    A RAY_ADDRESS of a Ray Jobs API is refused here, at the start: tasks cannot be sent through it."""
    jobs_api = os.environ.get("RAY_ADDRESS", "")
    if cfg.ray_address is None and is_jobs_api(jobs_api):
        raise ShardingError(
            f"shard.ray_address is not set and RAY_ADDRESS ({jobs_api}) is a Ray Jobs API, which runs "
            "jobs, not tasks: set shard.ray_address to the cluster's GCS (host:6379) or Ray Client "
            "(ray://host:10001) address"
        )
    return cfg.ray_address


def write_on_ray(specs: list[ShardSpec], cfg: ShardConfig) -> list[ShardResult]:
    """Write each shard as a Ray task, in the order they finish; on an error or a stop the tasks not
    finished are cancelled."""
    import ray

    address = ray_cluster(cfg)
    env_vars = worker_env()
    with ray_session(address, runtime_env={"env_vars": env_vars} if env_vars else None):
        write = ray.remote(write_shard).options(
            name="write_shard",
            num_cpus=cfg.cpus_per_task,
            max_retries=NODE_LOSS_RETRIES,
            scheduling_strategy="SPREAD",  # over the nodes, not the driver's first
        )
        # the config goes into each task (a small argument, inlined), not into the object store: a
        # task on a node that dies while it fetched a stored argument failed with OwnerDiedError (an
        # error of the task, not retried) although the driver, its owner, was alive
        pending = [write.remote(spec, cfg) for spec in specs]
        try:
            return list(track(_as_completed(pending), "shards", total=len(specs)))
        finally:
            for task in pending:
                ray.cancel(task, force=True)


def _as_completed(pending: list) -> Iterator[ShardResult]:
    """Results of the tasks in `pending` as they finish, taking each off the list."""
    import ray

    while pending:
        (done,), rest = ray.wait(pending, num_returns=1)
        pending[:] = rest
        yield ray.get(done)
