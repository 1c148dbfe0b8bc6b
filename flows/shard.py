"""`shard-dataset`: probe, filter and write a video dataset into WebDataset shards.

Shards are independent tasks mapped over the plan (in parallel processes), or with `shard.executor: ray`
Ray tasks on a cluster sent from one Prefect task; a finished shard is skipped, so retries and re-runs
only redo what is missing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from prefect import flow, get_client, get_run_logger, task, unmapped
from prefect.artifacts import create_table_artifact
from prefect.client.schemas.objects import State
from prefect.futures import as_completed
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.task_runners import ProcessPoolTaskRunner

from flows.forms import ShardForm, config_of
from vidtx.config import ShardConfig, SynthConfig
from vidtx.log import setup_logging, track
from vidtx.manifest import Manifest
from vidtx.results import ShardedSplit
from vidtx.shard.job import write_on_ray
from vidtx.shard.plan import ShardSpec
from vidtx.shard.writer import ShardResult, finalize_split, shard_line, write_shard
from vidtx.stages import shard as shard_stage

# Each task names what it works on and logs what it did: its run's log in the Prefect UI says more
# than Prefect's own "Finished in state Completed()".


@task(retries=2, retry_delay_seconds=10, task_run_name="synthesize {synth.output}")
def synthesize(synth: SynthConfig) -> str:
    done = shard_stage.synthesize(synth)
    get_run_logger().info("%s", done)
    return done


@task(retries=2, retry_delay_seconds=10, task_run_name="plan {shard.source}")
def plan(shard: ShardConfig) -> list[ShardSpec]:
    specs = shard_stage.plan_dataset(shard)  # also lists what is not sharded in ignored.jsonl
    get_run_logger().info("%s", shard_stage.plan_line(shard, specs))
    return specs


@task(retries=2, retry_delay_seconds=10, task_run_name="write {spec.name}")
def write(spec: ShardSpec, shard: ShardConfig) -> ShardResult:
    result = write_shard(spec, shard)  # idempotent: a finished shard is not written again
    get_run_logger().info("%s", shard_line(result))
    return result


@task(task_run_name="write {shard.output} as Ray tasks")
def write_as_ray_tasks(specs: list[ShardSpec], shard: ShardConfig) -> list[ShardResult]:
    """One Ray task per shard on the cluster; Ray runs a task again when its node is lost."""
    results = write_on_ray(specs, shard)
    for result in results:
        get_run_logger().info("%s", shard_line(result))
    return results


@task(retries=2, retry_delay_seconds=10, task_run_name="finalize {split}")
def finalize(shard: ShardConfig, split: str, results: list[ShardResult]) -> Manifest:
    manifest = finalize_split(shard, split, results)
    get_run_logger().info("%s", shard_stage.finalize_line(shard, manifest))
    return manifest


def write_as_tasks(specs: list[ShardSpec], shard: ShardConfig) -> list[ShardResult]:
    """Every shard written by a task of its own (in the flow's task processes), or, with
    `shard.executor: ray`, all of them as Ray tasks sent from one task."""
    if shard.executor == "ray":
        return write_as_ray_tasks(specs, shard)
    with _task_processes_share_the_api():
        futures = write.map(specs, shard=unmapped(shard))
        for _ in track(as_completed(futures), "write shards", total=len(specs)):
            pass
    return futures.result()


STEPS = shard_stage.ShardSteps(synthesize=synthesize, plan=plan, write=write_as_tasks, finalize=finalize)


def _task_process_logging() -> None:
    """Start of each of the flow's task processes: Prefect configures logging when it is imported (this
    module imports it), then vidtx takes over as in the parent (verbosity and log file from the
    environment), instead of every process printing Prefect's own console lines."""
    setup_logging()


@contextlib.contextmanager
def _task_processes_share_the_api() -> Iterator[None]:
    """Prefect's task processes find the API through PREFECT_API_URL. Without one (a temporary local
    API) each process started a temporary server of its own: ~20 s and a banner per process. They
    are given this flow run's."""
    if PREFECT_API_URL.value():
        yield
        return
    with get_client(sync_client=True) as client:
        api_url = str(client.api_url)
    with temporary_settings({PREFECT_API_URL: api_url}):
        yield


def publish(outcome: shard_stage.ShardOutcome) -> None:
    """Table artifacts: one row per shard (written now or reused), one row per rejected video."""
    manifests = outcome.manifests
    reused = {result.name for result in outcome.results if result.reused}
    shards = [
        {
            "split": m.split,
            "shard": s.name,
            "samples": s.samples,
            "MB": round(s.bytes / 1e6, 2),
            "sha256": s.sha256,
            "reused": s.name in reused,
        }
        for m in manifests.values()
        for s in m.shards
    ]
    create_table_artifact(shards, key="shards", description=f"Shards per split; {outcome.reuse_note()}")
    rejects = [
        {"split": m.split, "key": r.key, "path": r.path, "reason": r.reason}
        for m in manifests.values()
        for r in m.rejects
    ]
    create_table_artifact(
        rejects or [{"split": "", "key": "", "path": "", "reason": "no video was rejected"}],
        key="rejects",
        description="Videos that were skipped, with the reason",
    )


@flow(
    name="shard-dataset",
    task_runner=ProcessPoolTaskRunner(initializer=_task_process_logging),
    log_prints=True,
)
def shard_dataset(settings: ShardForm) -> dict[str, ShardedSplit] | State:
    """Shard the config's `shard.source` into WebDataset tars in `shard.output` (generating its `synth`
    dataset first when the config has one). Returns per split the manifest path, content hash,
    sample and reject counts."""
    config = config_of(settings, model=False)  # its storage settings too, before the writers start
    if isinstance(config, State):
        return config
    outcome = shard_stage.shard_dataset(config.shard, config.synth, STEPS)
    publish(outcome)
    for line in [*outcome.summary().splitlines(), f"{config.shard.output}: {outcome.reuse_note()}"]:
        get_run_logger().info("%s", line)  # the run's log ends with what was written
    return outcome.splits()
