"""Training on a real two-node Ray cluster on this machine: `vidtx train` submitted as a Ray Job, one
DeepSpeed (ZeRO-2, gloo) worker per node, checkpoints in storage both nodes reach (a file:// URI),
submitted by the train-model Prefect flow; then a node lost mid-run and replaced, and one lost during
an evaluation over Ray.

The nodes are separate `ray start` processes (`benchmarks/ray_nodes.py`), so the workers really are on
different Ray nodes, talk gloo over TCP and see only what they share: the file system here stands in
for S3/GCS/NFS. The tests run in file order on one cluster; the node-loss tests come last: training's
replaces node_b by node_c, then an evaluation over Ray loses node_c.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from demo_config import config_file
from mlflow import MlflowClient
from ray.job_submission import JobStatus, JobSubmissionClient
from ray.util.state import list_tasks
from training_runs import history

from benchmarks.ray_nodes import LocalCluster, head_and_node_b
from vidtx.config import PipelineConfig
from vidtx.eval.multiview import evaluate, predict_split
from vidtx.locations import location
from vidtx.manifest import load_manifest
from vidtx.model_factory import model_for
from vidtx.models import save_checkpoint
from vidtx.stages.train import train
from vidtx.stages.trained_model import load_trained_model
from vidtx.tracking.lineage import FLOW_RUN_TAG
from vidtx.tracking.rank_zero import STEP_METRIC
from vidtx.train.jobs import RUN_NAME_METADATA
from vidtx.train.payload import TrainResult

pytestmark = pytest.mark.slow

RANK_NODE = re.compile(r"pid=(\d+)\D.*?rank (\d+)/2 on node ([0-9a-f]+)")
RANK_SHARDS = re.compile(r"rank (\d+)/2 epoch (\d+) reads shards (\S+)")

# A driver of its own (the test's process may hold a local Ray already): `evaluate` over 2 Ray tasks on
# the cluster, one of them on `node`; writes its job and node once the tasks can start, then the result.
EVALUATE_ON_CLUSTER = """
import json, sys
from pathlib import Path
import ray
from ray.util.placement_group import placement_group
from vidtx.config.loading import load_config
from vidtx.eval.multiview import evaluate
from vidtx.manifest import load_manifest
from vidtx.models import load_checkpoint
from vidtx.ray_session import ray_session

gcs_port, node, config_file, checkpoint, started, result = sys.argv[1:]
with ray_session(f"127.0.0.1:{gcs_port}"):  # joined on loopback (ray.init alone leaves it)
    # one CPU of the head and one of `node` held: the two tasks (one CPU each) get one node each
    held = placement_group([{"CPU": 1, "head": 0.01}, {"CPU": 1, node: 0.01}])
    ray.get(held.ready(), timeout=60)
    context = ray.get_runtime_context()
    Path(started).write_text(json.dumps({"job": context.get_job_id(), "node": context.get_node_id()}))
    config = load_config(config_file)
    manifest = load_manifest(config.data.shards, config.eval.split)
    outcome = evaluate(load_checkpoint(checkpoint), manifest, config.data, config.eval)
    Path(result).write_text(json.dumps({"metrics": outcome.metrics(), "videos": outcome.num_videos}))
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A head node and a second node `node_b`, 2 logical CPUs each (one training worker plus Ray's own
    actors: the job driver and the Train controller need none)."""
    with head_and_node_b(num_cpus=2) as nodes:
        yield nodes


@pytest.fixture
def on_cluster(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> LocalCluster:
    monkeypatch.setenv("RAY_ADDRESS", cluster.dashboard)
    return cluster


def cluster_config(tiny_config: PipelineConfig, workdir: Path, **train: object) -> PipelineConfig:
    """Two workers one per node, ZeRO-2 fp32, checkpoints under a file:// URI both nodes see."""
    config = tiny_config.model_copy(deep=True)
    config.workdir = workdir
    config.train = config.train.model_copy(
        update={
            "storage_path": f"file://{workdir.resolve() / 'shared'}",
            "placement": "strict_spread",
            "zero_stage": 2,
            "precision": "fp32",
            "log_every": 1,
            **train,
        }
    )
    # every rank's lines verbatim: Ray's log deduplication would fold rank 1's into rank 0's
    config.train.cluster.runtime_env = {"env_vars": {"RAY_DEDUP_LOGS": "0"}}
    return config


def runs_in_experiment(result: TrainResult) -> list[str]:
    client = MlflowClient(result.tracking_uri)
    experiment = client.get_run(result.mlflow_run_id).info.experiment_id
    return [run.info.run_id for run in client.search_runs([experiment])]


def rank_nodes(logs: str) -> list[tuple[int, str]]:
    """(rank, node id) of every worker start in the job's logs, in order (a line that Ray's log
    forwarding printed twice counted once: one start per worker process)."""
    starts = dict.fromkeys(RANK_NODE.findall(logs))
    return [(int(rank), node) for _, rank, node in starts]


def test_train_model_flow_trains_on_two_nodes(
    tiny_config: PipelineConfig,
    tmp_path: Path,
    on_cluster: LocalCluster,
    capfd: pytest.CaptureFixture,
    prefect_api: None,
) -> None:
    """The train-model flow (real Prefect API) submits `vidtx train` to the cluster (RAY_ADDRESS)."""
    from flows.forms import TrainForm
    from flows.train import train_model

    config = cluster_config(tiny_config, tmp_path, max_steps=60, checkpoint_every=30, run_name="two-nodes")
    config.train.optimizer.lr = 0.003
    settings = TrainForm(config=config_file(config, tmp_path))
    state = train_model(settings, return_state=True)
    assert state.is_completed()
    result = state.result()
    flow_run_id = str(state.state_details.flow_run_id)
    logs = capfd.readouterr().out

    nodes = on_cluster.alive_nodes()
    placed = dict(rank_nodes(logs))
    assert sorted(placed) == [0, 1]
    assert placed[0] != placed[1]  # one worker per node
    assert {nodes[node] for node in placed.values()} == {"head", "node_b"}

    all_shards = {Path(url).name for url in load_manifest(config.data.shards, "train").shard_urls()}
    assert len(all_shards) >= 2
    epochs: dict[int, dict[int, set[str]]] = defaultdict(dict)
    for rank, epoch, shards in RANK_SHARDS.findall(logs):
        epochs[int(epoch)][int(rank)] = set(shards.split(","))
    assert len(epochs) >= 60 // math.ceil(24 / 2 / 4) - 1  # one line per rank and epoch
    for epoch, by_rank in epochs.items():
        assert sorted(by_rank) == [0, 1], epoch
        assert not by_rank[0] & by_rank[1], epoch  # disjoint
        assert by_rank[0] | by_rank[1] == all_shards, epoch  # together the whole split
    assert len({frozenset(by_rank[0]) for by_rank in epochs.values()}) > 1  # dealt anew each epoch

    losses = list(history(result, STEP_METRIC).values())
    assert len(losses) == 60
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10
    assert runs_in_experiment(result) == [result.mlflow_run_id]  # one MLflow run for both nodes
    run = MlflowClient(result.tracking_uri).get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[FLOW_RUN_TAG] == flow_run_id
    assert run.data.tags["vidtx.manifest_hash"]  # added by the job itself
    assert result.run_name == "two-nodes"
    assert "vidtx.train" in logs  # the job's logs were followed

    # checkpoints and the consolidated model come from the shared storage (a file:// URL is a path here)
    assert result.checkpoint
    assert result.checkpoint.startswith(f"{location(config.train.storage_path)}/two-nodes/checkpoint-")
    assert Path(result.checkpoint, "state").is_dir()
    model = load_trained_model(config, result.checkpoint)
    outputs = predict_split(model, config.data, config.data.val_split, num_clips=1, num_crops=1, batch_size=4)
    loss = torch.nn.functional.cross_entropy(outputs.logits[:, 0], outputs.labels).item()
    assert loss == pytest.approx(result.metrics["val_loss"], rel=1e-4)

    # Run again (Prefect's Retry of a pipeline lost after its training): the finished job's result,
    # no second Ray Job resuming at the last step to train nothing; the MLflow run FINISHED again
    again = train_model(settings)
    assert again == result
    jobs = JobSubmissionClient(on_cluster.dashboard).list_jobs()
    assert [job.status for job in jobs if (job.metadata or {}).get(RUN_NAME_METADATA) == "two-nodes"] == [
        JobStatus.SUCCEEDED
    ]
    assert MlflowClient(result.tracking_uri).get_run(result.mlflow_run_id).info.status == "FINISHED"


def test_lost_node_is_replaced_and_training_resumes_from_shared_storage(
    tiny_config: PipelineConfig,
    tmp_path: Path,
    on_cluster: LocalCluster,
    capfd: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The workers' output: printed by Ray, or records of `ray.workers` where vidtx set up logging.
    caplog.set_level(logging.INFO, logger="ray.workers")
    # 28 steps after the kill: Ray notices the node's death several seconds late (one run in five
    # trained 13 more steps before its worker group failed); with 18 the run could end first
    config = cluster_config(tiny_config, tmp_path, max_steps=40, checkpoint_every=5, max_failures=1)
    outcome: dict[str, TrainResult | BaseException] = {}
    progress: list[int] = []

    def run() -> None:
        try:
            outcome["result"] = train(
                config,
                run_name="node-lost",
                tags={"origin": "test"},
                progress=lambda s, n, m, v: progress.append(s),
            )
        except BaseException as err:  # re-raised in the test's thread
            outcome["error"] = err

    trainer = threading.Thread(target=run, daemon=True)
    trainer.start()
    client = MlflowClient(f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    deadline = time.monotonic() + 240
    reached = 0
    while time.monotonic() < deadline and trainer.is_alive() and reached < 12:
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        if runs:
            reached = max(
                (p.step for p in client.get_metric_history(runs[0].info.run_id, STEP_METRIC)), default=0
            )
        time.sleep(0.5)
    assert reached >= 12, outcome
    node_b = next(node for node in on_cluster.nodes if node.name == "node_b")
    node_b.kill_raylet()  # the machine is gone: its worker dies, rank 0's gloo peer with it
    on_cluster.add_node("node_c")  # a replacement (what an autoscaler or a restarted machine gives)
    trainer.join(timeout=400)
    assert not trainer.is_alive(), "training did not finish after the node was replaced"
    if "error" in outcome:
        raise outcome["error"]
    result = outcome["result"]
    assert isinstance(result, TrainResult)

    nodes = on_cluster.alive_nodes()
    placements = rank_nodes(capfd.readouterr().out + caplog.text)
    assert len(placements) >= 4, placements  # two ranks started, then started again
    assert {nodes.get(node, "dead") for _, node in placements[:2]} == {"head", "dead"}  # node_b is gone
    assert {nodes.get(node, "dead") for _, node in placements[-2:]} == {"head", "node_c"}
    assert result.metrics["step"] == 40
    restarts = history(result, "train/resumed_from_step")
    assert len(restarts) == 1
    (resumed_at,) = restarts
    # from a checkpoint: the one current at the kill or a later one (the worker on the dead node
    # trains on until Ray notices), or the one before it (Ray registers reports asynchronously),
    # never from 0
    assert reached // 5 * 5 - 5 <= resumed_at < 40
    assert resumed_at % 5 == 0
    assert sorted(history(result, STEP_METRIC)) == list(range(1, 41))  # no step counted twice
    assert history(result, "train/samples_seen")[40] == 40 * 2 * config.train.micro_batch_size
    assert runs_in_experiment(result) == [result.mlflow_run_id]
    # the submitter's tags and progress callback reach the run submitted as a Ray Job
    run = MlflowClient(result.tracking_uri).get_run(result.mlflow_run_id)
    assert run.data.tags["origin"] == "test"
    assert progress
    assert progress[-1] == 40


def test_evaluation_survives_a_lost_node(
    tiny_config: PipelineConfig, tmp_path: Path, cluster: LocalCluster
) -> None:
    """`evaluate` over 2 Ray tasks, the node running one of them lost (its raylet SIGKILLed): the task
    runs again on the driver's node with the model from the driver's object store, and the result is
    that of a one-process evaluation."""
    config = tiny_config.model_copy(deep=True)
    # 24 videos of 64x3 views, one at a time: each task runs for seconds, time to lose its node
    config.eval = config.eval.model_copy(
        update={"split": "train", "num_clips": 64, "num_crops": 3, "batch_size": 1, "num_workers": 2}
    )
    model = model_for(config)
    save_checkpoint(model, tmp_path / "model.pt")
    (lost,) = set(cluster.alive_nodes().values()) - {"head"}  # node_b, or node_c after the test above
    started, output, log = tmp_path / "started.json", tmp_path / "result.json", tmp_path / "driver.log"
    arguments = [
        cluster.gcs_port,
        lost,
        config_file(config, tmp_path),
        tmp_path / "model.pt",
        started,
        output,
    ]
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    with log.open("wb") as out:
        driver = subprocess.Popen(
            [sys.executable, "-c", EVALUATE_ON_CLUSTER, *map(str, arguments)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline, running = time.monotonic() + 90, []
        while not running:
            assert driver.poll() is None, f"the evaluation ended before its node was lost: {log.read_text()}"
            assert time.monotonic() < deadline, f"no evaluation task ran on {lost}: {log.read_text()}"
            time.sleep(0.2)
            if started.exists():
                job = json.loads(started.read_text())["job"]
                nodes = cluster.alive_nodes()
                tasks = list_tasks(
                    address=cluster.dashboard,
                    filters=[
                        ("job_id", "=", job),
                        ("name", "=", "_predict_remote"),
                        ("state", "=", "RUNNING"),
                    ],
                )
                running = [task for task in tasks if nodes.get(task.node_id) == lost]
        lost_node = next(node for node in cluster.nodes if node.name == lost)
        lost_node.kill_raylet()
        driver.wait(timeout=120)
    finally:
        driver.kill()
    assert driver.returncode == 0, log.read_text()
    result = json.loads(output.read_text())

    manifest = load_manifest(config.data.shards, "train")
    one_process = evaluate(model, manifest, config.data, config.eval.model_copy(update={"num_workers": 1}))
    assert result["videos"] == one_process.num_videos == manifest.num_samples  # each video once
    assert result["metrics"] == pytest.approx(one_process.metrics(), abs=1e-5)
    assert nodes[json.loads(started.read_text())["node"]] == "head"  # the driver's node (owns the model)
    attempts = list_tasks(
        address=cluster.dashboard, filters=[("job_id", "=", job), ("name", "=", "_predict_remote")]
    )
    retried = {task.task_id for task in attempts if task.attempt_number > 0}
    assert retried == {running[0].task_id}, attempts  # the lost node's task, run again
