"""Sharding as Ray tasks on a real two-node Ray cluster on this machine, into the tests' S3 server: a
node lost mid-job costs its task a retry on the other node, and the shards come out once, whole and
byte for byte those of the process pool."""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ray.util.state import list_tasks

from benchmarks.ray_nodes import LocalCluster, head_and_node_b
from infra.local.s3_server import requests
from vidtx import storage
from vidtx.config import ReencodeConfig, ShardConfig, SynthConfig
from vidtx.manifest import load_manifest
from vidtx.shard.job import ray_cluster, shard_dataset
from vidtx.shard.synthetic import generate_dataset
from vidtx.shard.writer import ShardingError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A head node and `node_b`, one CPU each: one shard task at a time per node."""
    with head_and_node_b(num_cpus=1) as nodes:
        yield nodes


def write_attempts(cluster: LocalCluster) -> list:
    return list_tasks(address=cluster.dashboard, filters=[("name", "=", "write_shard")], detail=True)


def lose_node_b_mid_task(cluster: LocalCluster, lost: dict[str, str]) -> None:
    """Wait until a shard task runs on node_b, then kill node_b's raylet (the machine is gone)."""
    (node_b,) = [node for node in cluster.nodes if node.name == "node_b"]
    node_ids = {name: node_id for node_id, name in cluster.alive_nodes().items()}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        running = [
            task
            for task in write_attempts(cluster)
            if task.state == "RUNNING" and task.node_id == node_ids["node_b"]
        ]
        if running:
            lost["task_id"] = running[0].task_id
            node_b.kill_raylet()
            return
        time.sleep(0.2)


def overlapping(attempts: list) -> list[tuple[str, str]]:
    """Pairs of task attempts that ran at the same time on the same node."""
    by_node = defaultdict(list)
    for task in attempts:
        if task.start_time_ms and task.end_time_ms:
            by_node[task.node_id].append((task.start_time_ms, task.end_time_ms, task.task_id))
    pairs = []
    for spans in by_node.values():
        spans.sort()
        pairs += [(a[2], b[2]) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    return pairs


def test_a_node_lost_mid_job_retries_its_shard_elsewhere_and_every_shard_is_written_once(
    cluster: LocalCluster,
    bucket: str,
    s3_log: Path,
    tmp_path: Path,
    vidtx: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    dataset = generate_dataset(
        SynthConfig(output=tmp_path / "videos", videos_per_class={"train": 4}, classes=["moving_up", "moving_down"],
                    num_frames=8, size=32)
    )  # fmt: skip
    config = ShardConfig(
        source=dataset,
        output=f"{bucket}/shards",
        max_samples_per_shard=1,
        reencode=ReencodeConfig(short_side=32),
        executor="ray",
        ray_address=f"127.0.0.1:{cluster.gcs_port}",
        cpus_per_task=1,
    )
    lost: dict[str, str] = {}
    killer = threading.Thread(target=lose_node_b_mid_task, args=(cluster, lost), daemon=True)
    since = s3_log.stat().st_size
    killer.start()
    # `vidtx shard` in a process of its own: this one may hold the session's local Ray already
    sets = [f"shard.{name}={value}" for name, value in
            {"max_samples_per_shard": 1, "reencode.short_side": 32, "executor": "ray",
             "ray_address": config.ray_address, "cpus_per_task": 1}.items()]  # fmt: skip
    done = vidtx("shard", str(dataset), config.output, *(f"--set={item}" for item in sets))
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = load_manifest(config.output, "train")
    killer.join()

    assert lost, "no shard task ran on node_b"
    attempts = write_attempts(cluster)
    retried = [t for t in attempts if t.task_id == lost["task_id"] and t.attempt_number > 0]
    assert [t.state for t in retried] == ["FINISHED"]  # once more, on the node that was left
    assert not overlapping(attempts)  # one CPU per node, one CPU per task: never two at once

    assert manifest.num_samples == len(manifest.shards) == 8
    # a multipart upload's object appears when it is completed: POST <key>?uploadId=...
    uploads = [
        r.split("?")[0] for r in requests(s3_log, since) if r.startswith("POST ") and ".tar?uploadId=" in r
    ]
    assert len(uploads) == len(set(uploads)) == 8  # every tar uploaded once
    assert storage.names(config.output, ".tar") == [shard.name for shard in manifest.shards]

    # the same tars, byte for byte, as the process pool writes on one machine
    on_disk = config.model_copy(update={"output": tmp_path / "shards", "executor": "processes"})
    assert shard_dataset(on_disk)["train"].content_hash == manifest.content_hash


def test_a_jobs_api_address_is_refused_at_the_start_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")
    with pytest.raises(ShardingError, match=r"shard\.ray_address is not set and RAY_ADDRESS"):
        ray_cluster(ShardConfig(executor="ray"))
    with pytest.raises(ValueError, match=r"ray_address\n.*Ray Jobs API"):
        ShardConfig(executor="ray", ray_address="http://127.0.0.1:8265")
