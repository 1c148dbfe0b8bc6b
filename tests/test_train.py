"""Ray Train + DeepSpeed on CPU: real Ray (local), real DeepSpeed engines (gloo), real MLflow (SQLite)."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
import ray
import torch
from media import cut_in_video
from mlflow import MlflowClient
from sockets import exposed, listening_sockets, process_tree
from training_runs import history, logged_keys, run_config, trained_until, uninterrupted_keys

from vidtx import storage
from vidtx.config import ConfigError, PipelineConfig, ShardConfig, SourceConfig, dump_config, load_config
from vidtx.data.shares import UnreadableShardsError, epoch_shards
from vidtx.eval.metrics import top_k_correct
from vidtx.eval.multiview import predict_split
from vidtx.locations import location
from vidtx.manifest import load_manifest
from vidtx.stages.shard import shard_dataset
from vidtx.stages.train import train
from vidtx.stages.trained_model import load_trained_model
from vidtx.tracking.rank_zero import STEP_METRIC
from vidtx.tracking.runs import RUN_NAME_TAG
from vidtx.train.payload import checkpoint_uri

pytestmark = pytest.mark.slow


def test_two_workers_zero2_loss_goes_down(trained_run: tuple) -> None:
    """The session's trained run: 150 steps of ZeRO-2 fp32 on 2 workers (bf16 through Ray Train is the
    killed-then-stopped run's; each precision on engines: test_engine.py)."""
    _, result = trained_run
    losses = list(history(result, STEP_METRIC).values())
    assert len(losses) == 150
    chance = math.log(4)  # the loss of a uniform guess over the 4 classes, where training starts
    assert losses[0] == pytest.approx(chance, rel=0.15)
    assert sum(losses[-10:]) / 10 < 0.85 * chance
    assert result.metrics["step"] == 150
    assert Path(result.checkpoint, "state").is_dir()
    client = MlflowClient(result.tracking_uri)
    runs = client.search_runs([client.get_run(result.mlflow_run_id).info.experiment_id])
    assert [run.info.run_id for run in runs] == [result.mlflow_run_id]  # one run, not one per worker
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags[RUN_NAME_TAG] == "loss-down"
    assert run.data.tags["vidtx.manifest_hash"]
    assert run.data.params["train.zero_stage"] == "2"
    for metric in ("train/lr", "train/clips_per_second", "train/samples_seen", "train/grad_norm", "val/top1"):
        assert metric in run.data.metrics
    waits = history(result, "train/data_wait")  # the share of wall time the ranks waited for batches
    assert len(waits) == 150
    assert all(
        0 <= wait <= slowest <= 1
        for wait, slowest in zip(waits.values(), history(result, "train/data_wait_max").values(), strict=True)
    )
    assert waits[1] > 0  # the first batch waits for the loader to start
    # the session's trainings started their workers and Ray Train's actors, but no Ray Data
    # DatasetManager: vidtx gives Ray no datasets (vidtx.train.launcher drops Ray Data's callback)
    started = {actor["ActorClassName"] for actor in ray._private.state.actors().values()}
    assert {"RayTrainWorker", "TrainController"} <= started, started
    assert "DatasetManager" not in started, started
    inputs = {i.tags[0].value: i.dataset for i in run.inputs.dataset_inputs}  # MLflow dataset inputs
    shards = trained_run[0].data.shards
    for context, split in (("training", "train"), ("validation", "val")):
        assert inputs[context].name == f"{shards.name}/{split}"
        assert inputs[context].digest == load_manifest(shards, split).content_hash[:16]
        assert json.loads(inputs[context].source)["uri"].endswith(f"{split}.manifest.json")


@pytest.fixture(scope="module")
def one_val_shard(synthetic_shards: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic videos sharded at the default shard size: each split one shard (val: 12 samples)."""
    videos, _ = synthetic_shards
    output = tmp_path_factory.mktemp("one-val-shard") / "shards"
    shard_dataset(ShardConfig(source=videos / "annotations.csv", output=output, processes=1))
    assert len(load_manifest(output, "val").shards) == 1
    return output


@pytest.mark.timeout(300, method="thread")  # it used to wait forever (in ray.get: no signal ends it)
def test_a_rank_whose_shards_yield_no_sample_fails_the_run_naming_them(
    tiny_dataset: PipelineConfig, tmp_path: Path
) -> None:
    """Issue 27 case 4: rank 1's shards of the first epoch are cut in their first video."""
    config = run_config(tiny_dataset, tmp_path, max_steps=2, checkpoint_every=2, precision="fp32")
    config.data.shards = tmp_path / "shards"
    shutil.copytree(tiny_dataset.data.shards, config.data.shards)
    urls = load_manifest(config.data.shards, "train").shard_urls()
    cut = epoch_shards(urls, config.train.seed, 0, 1, 2)
    for url in cut:
        cut_in_video(Path(url), 0)
    names = ", ".join(Path(url).name for url in cut)
    message = f"rank 1: not one clip could be read from its shards {names} in {config.data.shards} "
    with pytest.raises(UnreadableShardsError, match=re.escape(message)):  # one line for the CLI
        train(config, run_name="unreadable")


def _kill_a_worker_after(config: PipelineConfig, step: int, killed: list[int]) -> None:
    """Wait until the run has logged `step` and has a registered checkpoint, then SIGKILL one Ray
    Train worker process."""
    trained_until(config, "killed", step, running=lambda: True)
    for process in psutil.Process().children(recursive=True):  # this session's Ray, not another's
        with contextlib.suppress(psutil.NoSuchProcess):
            if any("RayTrainWorker" in part for part in process.cmdline()):
                process.send_signal(signal.SIGKILL)
                killed.append(process.pid)
                return


def test_killed_worker_restarts_from_the_latest_checkpoint(
    tiny_dataset: PipelineConfig,
    tmp_path: Path,
    bucket: str,
    bucket_shards: str,
    bucket_frames_shards: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker SIGKILLed mid-run: Ray Train restarts the group, which resumes from the latest
    registered checkpoint, where each rank is in its epoch: from there on it trains on exactly the
    samples an uninterrupted run would have (2 ranks, 2 DataLoader workers each). The workers read
    two sources mixed by weight from buckets of the session's S3 server (the video store and the
    frames store) and keep the checkpoints in one (nothing of either on local disk; ZeRO-1, fp32);
    the run records both sources as dataset inputs, and the consolidated checkpoint, evaluated from
    the bucket, reproduces the engine's last validation loss."""
    # the fewest steps that prove the resume: epochs of 6 batches, checkpoints every 3 (the first in
    # the middle of an epoch, after an odd number of batches), the kill once step 4 is logged and a
    # checkpoint registered
    config = run_config(
        tiny_dataset,
        tmp_path,
        max_steps=12,
        micro_batch_size=4,  # 2 sources of 24 samples: epochs of 6 batches
        checkpoint_every=3,
        max_failures=1,
        precision="fp32",
        zero_stage=1,
        sample_log=tmp_path / "samples",
    )
    config.data.shards = location(bucket_shards)
    config.data.sources = [
        SourceConfig(shards=config.data.shards),
        SourceConfig(shards=bucket_frames_shards, weight=2),
    ]
    config.data.num_workers = 2
    config.train.storage_path = f"{bucket}/runs"
    killed: list[int] = []
    killer = threading.Thread(target=_kill_a_worker_after, args=(config, 4, killed), daemon=True)
    killer.start()
    result = train(config, run_name="killed")
    killer.join(timeout=10)
    assert killed, "no Ray Train worker was found to kill"
    assert result.metrics["step"] == 12
    restarts = history(result, "train/resumed_from_step")
    assert len(restarts) == 1
    (resumed_at,) = restarts
    # a registered checkpoint from before the kill (not always the newest one the workers wrote),
    # never a restart from 0
    assert 3 <= resumed_at < 12
    assert resumed_at % 3 == 0
    assert sorted(history(result, STEP_METRIC)) == list(range(1, 13))  # every step once
    for rank in (0, 1):
        assert logged_keys(tmp_path / "samples", rank) == uninterrupted_keys(config, rank, 12, monkeypatch)
    assert history(result, "train/samples_seen")[12] == 12 * 2 * config.train.micro_batch_size
    client = MlflowClient(result.tracking_uri)
    assert len(client.search_runs([client.get_run(result.mlflow_run_id).info.experiment_id])) == 1
    inputs = client.get_run(result.mlflow_run_id).inputs.dataset_inputs
    assert sorted((i.tags[0].value, json.loads(i.dataset.source)["uri"]) for i in inputs) == [
        ("training", f"{bucket_frames_shards}/train.manifest.json"),
        ("training", f"{bucket_shards}/train.manifest.json"),
        ("validation", f"{bucket_shards}/val.manifest.json"),
    ]
    assert result.checkpoint.startswith(f"{bucket}/runs/killed/checkpoint-")
    assert not (tmp_path / "ray").exists()
    run = MlflowClient(result.tracking_uri).get_run(result.mlflow_run_id)
    recorded = json.dumps(
        [run.data.params, run.data.tags, storage.read_text(result.storage_path + "/killed/vidtx-result.json")]
    )
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in recorded
    # the consolidated fp32 state dict, in a fresh model, reproduces the engine's validation loss
    model = load_trained_model(config, result.checkpoint)
    outputs = predict_split(model, config.data, config.data.val_split, num_clips=1, num_crops=1, batch_size=4)
    loss = torch.nn.functional.cross_entropy(outputs.logits[:, 0], outputs.labels).item()
    assert loss == pytest.approx(result.metrics["val_loss"], rel=1e-4)


def start_training_until(
    config: PipelineConfig, tmp_path: Path, run_name: str, step: int, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """`vidtx train` of `config` in a child process (with `env` added to its environment), returned
    once its MLflow run has logged `step` and Ray has registered a checkpoint of it."""
    config_file = tmp_path / "config.yaml"
    config_file.write_text(dump_config(config))
    command = [
        sys.executable,
        "-m",
        "vidtx",
        "train",
        str(config_file),
        "--set",
        f"train.run_name={run_name}",
    ]
    driver = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ | (env or {})
    )
    if not trained_until(config, run_name, step, running=lambda: driver.poll() is None):
        driver.kill()
        pytest.fail(f"training ended or stalled before step {step}: {driver.communicate()[1][-2000:]}")
    return driver


def kill_tree(driver: subprocess.Popen) -> None:
    """SIGKILL a `vidtx train` process tree: driver, local Ray, workers."""
    tree = psutil.Process(driver.pid)
    for process in [*tree.children(recursive=True), tree]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    driver.wait(timeout=60)


def test_a_killed_then_stopped_training_job_resumes_each_time_and_listens_on_loopback_only(
    tiny_dataset: PipelineConfig, frames_shards: Path, tmp_path: Path
) -> None:
    """One run of ZeRO-3 in bf16 over the frames store (packed JPEG frames), started three times
    (checkpoints every 3 of 24 steps; each Ray worker decodes in a DataLoader worker process):

    1. `vidtx train` while it trains: nothing of it is reachable from the network (the driver, its
       local Ray and the Ray Train workers with their torch rendezvous store and gloo transport; was:
       rank 0's store on *:port). Then SIGKILL to the whole process tree.
    2. `vidtx train` again, on a machine where a DeepSpeed op's build was interrupted (its lock left
       behind, which every training used to wait on for ever): it resumes; SIGTERM to it (what `make ui-stop`, `kill` and Prefect's cancel
       send): the local Ray and its workers stop with it, the MLflow run ends KILLED, exit code 143
       and one line saying so.
    3. `train()` again, with a longer budget: it resumes and finishes, every step logged once, in the
       one MLflow run (was a test of its own: a restarted run continues from its checkpoint)."""
    config = run_config(
        tiny_dataset, tmp_path, max_steps=24, checkpoint_every=3, precision="bf16", zero_stage=3
    )
    config.data.shards = frames_shards
    config.data.num_workers = 1  # decode in a DataLoader worker process (forkserver) inside each Ray worker
    client = MlflowClient(f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")

    driver = start_training_until(config, tmp_path, "killed-job", step=6)
    tree = psutil.Process(driver.pid).children(recursive=True)
    assert any("raylet" in p.name() for p in tree), [p.name() for p in tree]
    listening = listening_sockets(process_tree(driver.pid))
    workers = {where for where, names in listening.items() if "ray::RayTrainWo" in names}  # comm: 15 chars
    assert workers, listening  # the store and the transport of the workers were seen
    assert not exposed(listening), f"listening beyond loopback: {exposed(listening)}"
    kill_tree(driver)

    extensions = tmp_path / "torch_extensions"
    interrupted_build = extensions / "deepspeed_shm_comm" / "lock"
    interrupted_build.parent.mkdir(parents=True)
    interrupted_build.touch()  # its builder is gone: no process holds it open
    driver = start_training_until(
        config, tmp_path, "killed-job", step=12, env={"TORCH_EXTENSIONS_DIR": str(extensions)}
    )
    assert not interrupted_build.exists()
    tree = psutil.Process(driver.pid).children(recursive=True)
    driver.send_signal(signal.SIGTERM)
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 143, stderr[-2000:]
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, [p.name() for p in alive]
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "KILLED"
    stopped = f"training killed-job stopped: Ray shut down, MLflow run {run.info.run_id} ended KILLED"
    assert re.search(
        rf"{stopped}, checkpoints kept in \S+/killed-job; run the same command again to resume", stderr
    )
    assert max(p.step for p in client.get_metric_history(run.info.run_id, STEP_METRIC)) < 24

    config.train.run_name = "killed-job"
    config.train.max_steps = 27  # the same run, started again with a longer budget
    result = train(config)
    assert result.metrics["step"] == 27
    logged = client.get_metric_history(result.mlflow_run_id, "train/resumed_from_step")
    restarts = [point.value for point in sorted(logged, key=lambda point: point.timestamp)]
    assert len(restarts) == 2, restarts
    # each from a checkpoint before its stop (Ray registers reports asynchronously: maybe not the
    # newest one written), never from 0
    assert 3 <= restarts[0] <= restarts[1] < 24
    assert all(step % 3 == 0 for step in restarts)
    assert sorted(history(result, STEP_METRIC)) == list(range(1, 28))
    assert history(result, "train/samples_seen")[27] == 27 * 2 * config.train.micro_batch_size
    assert len(client.search_runs([e.experiment_id for e in client.search_experiments()])) == 1


def test_relative_paths_a_one_shard_validation_split_no_validation_split_and_the_same_seed(
    tiny_dataset: PipelineConfig,
    one_val_shard: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two 1-step runs over the videos sharded at the default size (val: one shard of 12), four checks:

    - Ray workers start in their own session folder; relative paths must still mean the driver's.
    - Issue 27 case 8: rank 1 had no val shard and the first validation crashed the run
      (`split_by_worker() missing 1 required positional argument: 'src'`). Now the ranks share the
      shard's samples and the logged figures are a one-process pass's over the same weights.
    - The second run (absolute paths) names a validation split the shards do not have: it trains
      with one warning (it used to train every step, then die at the final validation inside the Ray
      workers), without a score, and Ray keeps its latest checkpoint as the best.
    - The same seed gives the second run the first run's first-step loss."""
    (tmp_path / "shards").symlink_to(one_val_shard, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    config = run_config(tiny_dataset, Path("run"), max_steps=1, checkpoint_every=1, precision="fp32")
    config.data.shards = Path("shards")
    result = train(config, run_name="relative-paths")
    assert result.tracking_uri == f"sqlite:///{tmp_path.resolve() / 'run' / 'mlflow.db'}"
    assert 1 in history(result, STEP_METRIC)
    assert Path(result.checkpoint).resolve().is_relative_to(tmp_path.resolve() / "run" / "ray")

    logged = {name: history(result, f"val/{name}")[1] for name in ("top1", "loss", "clips")}
    model = load_trained_model(config, result.checkpoint)
    outputs = predict_split(model, config.data, "val", num_clips=1, num_crops=1, batch_size=4)
    logits = outputs.logits[:, 0]  # (12, 4): the centre view, as validation uses
    assert logged["clips"] == len(outputs.keys) == 12
    assert logged["top1"] == top_k_correct(logits, outputs.labels)[0] / 12
    loss = torch.nn.functional.cross_entropy(logits, outputs.labels).item()
    assert logged["loss"] == pytest.approx(loss, rel=1e-5)

    again = run_config(tiny_dataset, tmp_path / "again", max_steps=1, checkpoint_every=1, precision="fp32")
    again.data.shards, again.data.val_split = one_val_shard, "validation"  # the shards have train and val
    with caplog.at_level(logging.WARNING, logger="vidtx.train.splits"):
        seeded = train(again, run_name="seeded")
    warnings = [record.getMessage() for record in caplog.records if record.name == "vidtx.train.splits"]
    assert warnings == [
        f"data.val_split 'validation' has no manifest in {one_val_shard} (splits there: train, val): "
        "training without validation"
    ]
    assert "val_top1" not in seeded.metrics
    assert seeded.best_checkpoint == seeded.checkpoint  # without a score, Ray keeps the latest
    assert history(seeded, STEP_METRIC)[1] == history(result, STEP_METRIC)[1]


def test_strict_spread_on_too_few_nodes_fails_at_once(tiny_dataset: PipelineConfig, tmp_path: Path) -> None:
    """The session's local Ray has one node: waiting for a second one would wait forever."""
    config = run_config(tiny_dataset, tmp_path, placement="strict_spread", max_steps=1)
    with pytest.raises(ValueError, match="strict_spread needs 2 nodes"):
        train(config, run_name="strict-spread")


def test_checkpoint_paths_keep_the_storage_uri() -> None:
    """Ray reports paths inside the pyarrow file system; later stages need the URI back."""
    assert (
        checkpoint_uri("s3://bucket/runs", "bucket/runs/a/checkpoint-1") == "s3://bucket/runs/a/checkpoint-1"
    )
    assert checkpoint_uri("file:///mnt/x", "/mnt/x/a/checkpoint-1") == "/mnt/x/a/checkpoint-1"  # a path here
    assert checkpoint_uri("/mnt/x", "/mnt/x/a/checkpoint-1") == "/mnt/x/a/checkpoint-1"
    assert checkpoint_uri("gs://b/r", "gs://b/r/a/checkpoint-1") == "gs://b/r/a/checkpoint-1"
    with pytest.raises(ConfigError, match=r"train\.storage_path.*unsupported storage scheme 'hdfs'"):
        load_config(None, ["train.storage_path=hdfs://namenode/runs"])
