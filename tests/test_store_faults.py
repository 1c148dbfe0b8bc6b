"""A training that reads its shards from the session's SeaweedFS and keeps its checkpoints there,
through the faults of a real store (issue 69): its S3 gateway stopped for 20 s mid-epoch and started
again; the whole store (both of its processes) SIGKILLed and started again on its data folder.

The storage client waits out an outage of up to 51 s (`vidtx.storage.client`), so either run
finishes: every step logged once, each rank trained on exactly the samples of an uninterrupted run
(a skipped shard would change them, and is a line of the worker's log: `shares.CycledSamples`), and
every checkpoint Ray Train registered, the latest included, loads whole from the bucket."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from training_runs import history, logged_keys, run_config, trained_until, uninterrupted_keys

from infra.local.latency_proxy import requests
from infra.local.s3_server import SeaweedFS
from vidtx import storage
from vidtx.config import PipelineConfig
from vidtx.locations import location
from vidtx.stages.train import train
from vidtx.stages.trained_model import load_trained_model
from vidtx.storage import join
from vidtx.tracking.rank_zero import STEP_METRIC
from vidtx.train.payload import TrainResult

pytestmark = pytest.mark.slow
MAX_STEPS, FAULT_AT = 12, 4  # epochs of 6 batches, checkpoints every 3: the fault mid-epoch


def bucket_training(dataset: PipelineConfig, tmp_path: Path, bucket: str, shards: str) -> PipelineConfig:
    config = run_config(dataset, tmp_path, max_steps=MAX_STEPS, micro_batch_size=2, checkpoint_every=3,
                        max_failures=1, sample_log=tmp_path / "samples")  # fmt: skip
    config.data.shards = location(shards)
    config.train.storage_path = f"{bucket}/runs"
    return config


def train_through(config: PipelineConfig, run_name: str, fault: Callable[[], None]) -> TrainResult:
    """`train(config)`, with `fault()` made in a thread once the run has logged step FAULT_AT and
    Ray Train has registered a checkpoint (in the bucket)."""
    faulted = threading.Event()

    def when_due() -> None:
        if trained_until(config, run_name, FAULT_AT, running=lambda: True):
            fault()
            faulted.set()

    thread = threading.Thread(target=when_due, daemon=True)
    thread.start()
    result = train(config, run_name=run_name)
    thread.join(timeout=120)
    assert faulted.is_set(), "the run ended before its fault"
    return result


def assert_trained_as_if_uninterrupted(
    config: PipelineConfig, result: TrainResult, run_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert result.metrics["step"] == MAX_STEPS
    assert sorted(history(result, STEP_METRIC)) == list(range(1, MAX_STEPS + 1))  # every step once
    for rank in range(config.train.num_workers):
        assert logged_keys(config.workdir / "samples", rank) == uninterrupted_keys(
            config, rank, MAX_STEPS, monkeypatch
        )
    run_dir = join(location(config.train.storage_path), run_name)
    snapshot = json.loads(storage.read_text(join(run_dir, "checkpoint_manager_snapshot.json")))
    registered = [join(run_dir, entry["checkpoint_dir_name"]) for entry in snapshot["checkpoint_results"]]
    assert result.checkpoint in registered
    for checkpoint in registered:  # each whole: every rank's files there and readable
        load_trained_model(config, checkpoint)


def test_a_training_waits_out_its_s3_gateway_stopped_for_20_s_mid_epoch(
    tiny_dataset: PipelineConfig,
    tmp_path: Path,
    bucket: str,
    bucket_shards: str,
    s3_store: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = bucket_training(tiny_dataset, tmp_path, bucket, bucket_shards)
    outage: list[float] = []

    def stop_the_gateway_for_20_s() -> None:
        s3_store.stop("gateway")
        started = time.monotonic()
        try:
            time.sleep(20)
        finally:
            s3_store.start("gateway")
            outage.append(time.monotonic() - started)

    started = time.monotonic()
    result = train_through(config, "gateway-down", stop_the_gateway_for_20_s)
    assert outage[0] >= 20
    assert time.monotonic() - started > outage[0]  # it trained through the outage, not around it
    assert_trained_as_if_uninterrupted(config, result, "gateway-down", monkeypatch)


def test_a_training_goes_on_after_the_whole_store_is_killed_mid_upload_and_restarted_on_its_data(
    tiny_dataset: PipelineConfig,
    tmp_path: Path,
    bucket: str,
    bucket_shards: str,
    s3_store: SeaweedFS,
    s3_log: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store is SIGKILLed as a checkpoint's first file is being uploaded (the recorder in front of
    the gateway sees its request), down for 5 s, then started again on its folder."""
    config = bucket_training(tiny_dataset, tmp_path, bucket, bucket_shards)
    interrupted: list[str] = []

    def kill_the_store_mid_upload_then_restart_it() -> None:
        mark = s3_log.stat().st_size
        deadline = time.monotonic() + 120
        while not interrupted and time.monotonic() < deadline:
            interrupted.extend(
                request for request in requests(s3_log, mark)
                if request.startswith(("PUT ", "POST ")) and "/runs/store-killed/checkpoint-" in request
            )  # fmt: skip
            time.sleep(0.005)
        s3_store.stop(kill=True)  # SIGKILL: gateway and store, nothing flushed
        try:
            time.sleep(5)
        finally:
            s3_store.start()

    result = train_through(config, "store-killed", kill_the_store_mid_upload_then_restart_it)
    assert interrupted, "no checkpoint upload was seen to interrupt"
    assert_trained_as_if_uninterrupted(config, result, "store-killed", monkeypatch)
