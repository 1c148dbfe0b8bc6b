"""Sharding as Ray tasks against the process pool: what `shard.executor=ray` costs.

The same `vidtx shard` job, re-encoding synthetic 10-s 640x360 H.264 videos (`benchmarks.videos`)
to 256 px with a keyframe every 16 frames, one video per shard, from and to local disk folders: (1)
the process pool on one node (`shard.processes=2`), against (2) one Ray task per shard on a
two-node Ray cluster on this machine (`benchmarks.ray_nodes`: a head and `node_b`, one logical CPU
each, `shard.cpus_per_task=1`, tasks spread over both). Each job is `python -m vidtx shard` in a
process of its own, timed from its start to its exit, with the cluster already up. A one-video job
of each executor gives its fixed cost (start-up, plan, finalize), so that the cost per shard can be
told apart from it. Candidates are interleaved, each round in a rotated order.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ray.util.state import list_tasks

from benchmarks.ray_nodes import LocalCluster, head_and_node_b
from benchmarks.results import REPO_ROOT, BenchmarkResult, Table, fmt
from benchmarks.timing import Samples, interleaved, round_ratios
from benchmarks.videos import write_busy_videos, write_copies

log = logging.getLogger(__name__)

STORE = {
    "format": "folder",
    "max_samples_per_shard": 1,
    "reencode.short_side": 256,
    "reencode.keyframe_interval": 16,
}


def shard_command(source: Path, output: Path, **fields: object) -> Callable[[], float]:
    """A measurement: `vidtx shard source output` (a fresh output folder each time, since a re-run
    resumes) with STORE and `fields` set; returns its wall seconds."""
    outputs = itertools.count()
    sets = [f"--set=shard.{name}={value}" for name, value in (STORE | fields).items()]
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}

    def measure() -> float:
        command = [sys.executable, "-m", "vidtx", "shard", str(source), f"{output}-{next(outputs)}", *sets]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=False)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
        return seconds

    return measure


def tasks_per_node(cluster: LocalCluster) -> dict[str, int]:
    """Finished `write_shard` tasks of every job so far, by the node that ran them."""
    names = cluster.alive_nodes()
    tasks = list_tasks(
        address=cluster.dashboard, filters=[("name", "=", "write_shard")], detail=True, limit=10_000
    )
    return dict(Counter(names.get(task.node_id, "?") for task in tasks if task.state == "FINISHED"))


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    videos, rounds = (2, 1) if quick else (8, 3)
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-shard-ray-") as tmp:
        work = Path(tmp)
        distinct = write_busy_videos(work / "distinct", videos)
        write_copies(distinct, work / "data" / "busy", 1)
        write_copies(distinct[:1], work / "one" / "busy", 1)
        log.info("shard_ray: starting a two-node Ray cluster (1 CPU per node)")
        with head_and_node_b(num_cpus=1) as cluster:
            ray = {"executor": "ray", "ray_address": f"127.0.0.1:{cluster.gcs_port}", "cpus_per_task": 1}
            pool = {"executor": "processes", "processes": 2}
            candidates = {
                "process pool": shard_command(work / "data", work / "out-pool", **pool),
                "Ray tasks": shard_command(work / "data", work / "out-ray", **ray),
                "process pool, one video": shard_command(work / "one", work / "out-pool-one", **pool),
                "Ray tasks, one video": shard_command(work / "one", work / "out-ray-one", **ray),
            }
            log.info("shard_ray: %d videos, %d rounds", videos, rounds)
            seconds = interleaved(candidates, rounds)
            placement = tasks_per_node(cluster)
    ratio = round_ratios(seconds["Ray tasks"], seconds["process pool"])
    ratio_one = round_ratios(seconds["Ray tasks, one video"], seconds["process pool, one video"])
    per_shard = (
        {
            executor: Samples(
                tuple(
                    (n - one) / (videos - 1)
                    for n, one in zip(
                        seconds[executor].values, seconds[f"{executor}, one video"].values, strict=True
                    )
                )
            )
            for executor in ("process pool", "Ray tasks")
        }
        if videos > 1
        else {}
    )
    rows = [
        ["process pool (shard.processes=2), one node", fmt(seconds["process pool"].median), "1"],
        ["Ray tasks (cpus_per_task=1), two 1-CPU nodes", fmt(seconds["Ray tasks"].median), fmt(ratio.median)],
    ]
    fixed_rows = [
        ["process pool, one video", fmt(seconds["process pool, one video"].median), "1"],
        ["Ray tasks, one video", fmt(seconds["Ray tasks, one video"].median), fmt(ratio_one.median)],
    ]
    notes = [
        'Both "nodes" are one 2-core host (two `ray start --block` processes on the same machine), so '
        "this measures Ray's overhead against the process pool on the same two cores, not a speed-up from "
        "more machines: with two real machines the Ray job would have twice the cores.",
        f"Ray tasks take {fmt(ratio.median)}x the process pool's wall time for {videos} shards "
        f"(per-round ratios {', '.join(fmt(v) for v in ratio.values)}), and {fmt(ratio_one.median)}x for one "
        f"shard.",
        "The Ray figures include the job's Ray worker start-up: the cluster (GCS, raylets, dashboard) was up "
        "before the first job, but Ray workers belong to one job (driver), so every `vidtx shard` connects "
        "its driver and starts fresh workers, which import vidtx before the first task runs. The process "
        "pool likewise starts its forkserver workers in every job. Both include the CLI's Python start-up.",
        f"Finished write_shard tasks by node over all Ray jobs: {placement} (SPREAD over the two nodes).",
        "The cluster's idle processes (GCS, raylets, dashboard and agents) share the two cores during "
        "the process pool's runs as well.",
    ]
    if per_shard:
        pool_shard, ray_shard = per_shard["process pool"].median, per_shard["Ray tasks"].median
        notes.insert(
            2,
            f"Each further shard adds {fmt(ray_shard)} s to the Ray job and {fmt(pool_shard)} s to the process "
            f"pool's (median over rounds of (job - one-video job) / {videos - 1}); the fixed cost of a job is "
            f"{fmt(seconds['Ray tasks, one video'].median)} s on Ray and "
            f"{fmt(seconds['process pool, one video'].median)} s with the process pool.",
        )
    return BenchmarkResult(
        name="shard_ray",
        title="Sharding as Ray tasks against the process pool",
        summary=" ".join(__doc__.split("\n\n", 1)[1].split())
        + f" {videos} videos ({videos} shards); medians of {rounds} rounds.",
        inputs={"videos": videos, "rounds": rounds, "store": STORE, "ray_nodes": 2, "cpus_per_node": 1},
        tables=[
            Table(
                f"`vidtx shard` of {videos} videos, wall seconds",
                ["executor", "seconds", "× process pool"],
                rows,
            ),
            Table("A one-video job (the fixed cost)", ["executor", "seconds", "× process pool"], fixed_rows),
        ],
        raw={
            "seconds": seconds,
            "ray_over_pool": ratio,
            "ray_over_pool_one_video": ratio_one,
            "seconds_per_further_shard": per_shard,
            "write_shard_tasks_per_node": placement,
        },
        notes=notes,
        quick=quick,
    )
