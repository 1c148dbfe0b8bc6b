"""`shard-dataset`: probe, filter and write a video dataset into WebDataset shards.

Shards are independent tasks mapped over the plan (in parallel processes), or with `shard.executor: ray`
Ray tasks on a cluster sent from one Prefect task; a finished shard is skipped, so retries and re-runs
only redo what is missing.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

from prefect import flow, get_client, get_run_logger, task, unmapped
from prefect.artifacts import create_table_artifact
from prefect.futures import as_completed
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.task_runners import ProcessPoolTaskRunner
from pydantic import BaseModel

from vidtx.config import ShardConfig, StorageConfig, SynthConfig
from vidtx.log import setup_logging, track
from vidtx.manifest import Manifest, manifest_path
from vidtx.shard.job import plan_dataset, write_on_ray
from vidtx.shard.plan import ShardSpec
from vidtx.shard.synthetic import generate_dataset
from vidtx.shard.writer import ShardResult, finalize_split, shard_line, split_line, write_shard
from vidtx.storage import configure as configure_storage


class ShardedSplit(BaseModel):
    """One split as the flow reports it."""

    manifest: str  # path of <split>.manifest.json
    content_hash: str
    samples: int
    rejects: int


# Each task names what it works on and logs what it did: its run's log in the Prefect UI says more
# than Prefect's own "Finished in state Completed()".


@task(retries=2, retry_delay_seconds=10, task_run_name="synthesize {synth.output}")
def synthesize(synth: SynthConfig) -> str:
    """Generate the synthetic dataset unless it is there already (generation is deterministic)."""
    annotations = synth.output / "annotations.csv"
    if annotations.is_file():
        get_run_logger().info(
            "%s is there already: the synthetic dataset is not generated again", annotations
        )
        return str(annotations)
    generate_dataset(synth)
    get_run_logger().info("generated the synthetic dataset: %s", annotations)
    return str(annotations)


@task(retries=2, retry_delay_seconds=10, task_run_name="plan {shard.source}")
def plan(shard: ShardConfig) -> list[ShardSpec]:
    specs = plan_dataset(shard)  # also lists what is not sharded in ignored.jsonl
    per_split = Counter(spec.split for spec in specs)
    planned = ", ".join(f"{count} of {split}" for split, count in per_split.items())
    get_run_logger().info("planned %d shards (%s) into %s", len(specs), planned, shard.output)
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
    get_run_logger().info("%s; manifest %s", split_line(manifest), manifest_path(shard.output, split))
    return manifest


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


def reuse_note(results: list[ShardResult]) -> str:
    reused = sum(result.reused for result in results)
    return f"reused {reused} of {len(results)} shards (already complete from the same plan)"


def publish(manifests: dict[str, Manifest], results: list[ShardResult]) -> None:
    """Table artifacts: one row per shard (written now or reused), one row per rejected video."""
    reused = {result.name for result in results if result.reused}
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
    create_table_artifact(shards, key="shards", description=f"Shards per split; {reuse_note(results)}")
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
def shard_dataset(
    shard: ShardConfig, synth: SynthConfig | None = None, storage: StorageConfig | None = None
) -> dict[str, ShardedSplit]:
    """Shard `shard.source` into WebDataset tars in `shard.output` (generating `synth` first when set;
    `storage`: the S3 endpoint and region of s3:// locations, when not the environment's).

    Returns per split the manifest path, content hash, sample and reject counts.
    """
    if storage is not None:  # before any s3:// location, and before the writers' processes start
        configure_storage(storage.endpoint_url, storage.region)
    if synth is not None:
        synthesize(synth)
    specs = plan(shard)
    if shard.executor == "ray":
        results = write_as_ray_tasks(specs, shard)
    else:
        with _task_processes_share_the_api():
            futures = write.map(specs, shard=unmapped(shard))
            for _ in track(as_completed(futures), "write shards", total=len(specs)):
                pass
        results = futures.result()
    get_run_logger().info("%s: %s", shard.output, reuse_note(results))
    manifests = {
        split: finalize(shard, split, results) for split in dict.fromkeys(spec.split for spec in specs)
    }
    publish(manifests, results)
    return {
        split: ShardedSplit(
            manifest=str(manifest_path(shard.output, split)),
            content_hash=manifest.content_hash,
            samples=manifest.num_samples,
            rejects=len(manifest.rejects),
        )
        for split, manifest in manifests.items()
    }
