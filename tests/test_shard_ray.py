"""Sharding as Ray tasks on a real two-node Ray cluster on this machine, into the tests' S3 server: a
node lost while it writes a shard costs the job nothing: every shard comes out once in the manifest,
whole in the bucket and byte for byte what the process pool writes.

What is asserted is what vidtx promises (the job's result and its shards), not Ray's state API's view
of task attempts around a node's death, which lags and reorders while the node dies."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from benchmarks.ray_nodes import LocalCluster, head_and_node_b
from infra.local.latency_proxy import latency_proxy, requests
from infra.local.ports import free_port
from vidtx import storage
from vidtx.config import ReencodeConfig, ShardConfig, SynthConfig
from vidtx.manifest import load_manifest
from vidtx.shard.job import ray_cluster
from vidtx.shard.synthetic import generate_dataset
from vidtx.shard.writer import ShardingError
from vidtx.stages.shard import shard_dataset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A head node and `node_b`, one CPU each: one shard task at a time per node."""
    with head_and_node_b(num_cpus=1) as nodes:
        yield nodes


def running_task(process: psutil.Process) -> str:
    """The task a Ray worker runs, from the title Ray gives it (`ray::write_shard`), else ""."""
    with contextlib.suppress(psutil.Error):
        title = " ".join(process.cmdline())
        return title.removeprefix("ray::").split()[0] if title.startswith("ray::") else ""
    return ""


def lose_node_b_mid_task(cluster: LocalCluster, lost: dict[str, int], job_over: threading.Event) -> None:
    """Wait until a Ray worker of node_b runs `write_shard`, then kill every process of node_b at
    once (the machine is gone); give up when the job is over."""
    (node_b,) = [node for node in cluster.nodes if node.name == "node_b"]
    while not job_over.is_set():
        writers = [p for p in node_b.tree() if running_task(p) == "write_shard"]
        if writers:
            lost["writer"] = writers[0].pid
            node_b.stop()
            return
        time.sleep(0.05)


def test_a_node_lost_mid_job_costs_nothing_and_every_shard_is_written_once(
    cluster: LocalCluster,
    bucket: str,
    s3_log: Path,
    tmp_path: Path,
    vidtx: Callable[..., subprocess.CompletedProcess[str]],
    monkeypatch: pytest.MonkeyPatch,
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
    lost: dict[str, int] = {}
    job_over = threading.Event()
    killer = threading.Thread(target=lose_node_b_mid_task, args=(cluster, lost, job_over), daemon=True)
    since = s3_log.stat().st_size
    killer.start()
    # `vidtx shard` in a process of its own (this one may hold the session's local Ray already),
    # reaching the bucket through a proxy that holds each request back: a task of these tiny videos
    # takes a few milliseconds, too short to be seen and killed; uploading its tar now takes a few
    # requests of 100 ms, during which node_b dies with it in hand (was: a race the killer lost by chance)
    sets = [f"shard.{name}={value}" for name, value in
            {"max_samples_per_shard": 1, "reencode.short_side": 32, "executor": "ray",
             "ray_address": config.ray_address, "cpus_per_task": 1}.items()]  # fmt: skip
    server_port = int(os.environ["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    with latency_proxy(free_port(), server_port, 100) as slow_bucket, monkeypatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", slow_bucket)
        done = vidtx("shard", str(dataset), config.output, *(f"--set={item}" for item in sets))
    job_over.set()
    killer.join()
    assert done.returncode == 0, done.stderr[-3000:]
    assert lost, f"no shard task was seen on node_b: {done.stderr[-3000:]}"
    assert not psutil.pid_exists(lost["writer"])  # node_b died with a shard in hand

    # every shard once in the manifest, and nothing else in the bucket
    manifest = load_manifest(config.output, "train")
    names = [shard.name for shard in manifest.shards]
    assert manifest.num_samples == len(names) == len(set(names)) == 8
    assert storage.names(config.output, ".tar") == names
    # every tar whole: the bytes the manifest records (a multipart upload appears only when completed)
    for shard in manifest.shards:
        tar = storage.read_bytes(f"{config.output}/{shard.name}")
        assert (len(tar), hashlib.sha256(tar).hexdigest()) == (shard.bytes, shard.sha256), shard.name
    uploads = {
        r.split("?")[0] for r in requests(s3_log, since) if r.startswith("POST ") and ".tar?uploadId=" in r
    }
    assert len(uploads) == 8  # each tar was uploaded by the job (none was left from elsewhere)

    # the same tars, byte for byte, as the process pool writes on one machine
    on_disk = config.model_copy(update={"output": tmp_path / "shards", "executor": "processes"})
    assert shard_dataset(on_disk).manifests["train"].content_hash == manifest.content_hash


def test_a_jobs_api_address_is_refused_at_the_start_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")
    with pytest.raises(ShardingError, match=r"shard\.ray_address is not set and RAY_ADDRESS"):
        ray_cluster(ShardConfig(executor="ray"))
    with pytest.raises(ValueError, match=r"ray_address\n.*Ray Jobs API"):
        ShardConfig(executor="ray", ray_address="http://127.0.0.1:8265")
