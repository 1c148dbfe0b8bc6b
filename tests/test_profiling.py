"""Seeing where a step's time goes (issue 45, item 6): the share of wall time spent waiting for data,
and a torch profiler trace of chosen steps."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
import torch

from vidtx.config import TrainConfig
from vidtx.train.profiling import StepProfiler
from vidtx.train.throughput import ThroughputMeter


def test_data_wait_is_the_share_of_the_window_spent_waiting() -> None:
    meter = ThroughputMeter(world_size=1, train_flops_per_clip=None, peak_flops=None)
    meter.lap()
    asked = time.perf_counter()
    time.sleep(0.2)  # waiting for a batch
    meter.waited(time.perf_counter() - asked)
    time.sleep(0.2)  # computing
    meter.update(4)
    rates = meter.lap()
    assert 0.4 <= rates["data_wait"] <= 0.55  # 0.2 s of at least 0.4 s
    time.sleep(0.05)
    assert meter.lap()["data_wait"] == 0.0  # a new window


def train_steps(model: torch.nn.Module, profiler: StepProfiler, steps: int) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, steps + 1):
        profiler.step_starts(step)
        loss = model(torch.randn(8, 16)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        profiler.step_ends(step)


def test_the_profiled_steps_are_one_trace_and_an_operator_table(tmp_path: Path) -> None:
    published: list[dict[str, bytes]] = []

    def publish(folder: Path) -> None:  # the folder is gone after the call, as after MLflow's upload
        published.append({path.name: path.read_bytes() for path in folder.iterdir()})

    train_steps(torch.nn.Linear(16, 4), StepProfiler((2, 3), enabled=True, publish=publish), steps=5)
    assert len(published) == 1
    trace = json.loads(gzip.decompress(published[0]["trace.json.gz"]))
    names = {event.get("name", "") for event in trace["traceEvents"]}
    assert "aten::addmm" in names  # the linear layer's forward
    assert "Optimizer.step#SGD.step" in names
    table = published[0]["operators.txt"].decode()
    assert table.startswith("steps 2-3\n")
    assert "aten::addmm" in table


def test_no_trace_on_other_ranks_or_without_steps() -> None:
    published: list[Path] = []
    train_steps(
        torch.nn.Linear(16, 4), StepProfiler((1, 2), enabled=False, publish=published.append), steps=3
    )
    train_steps(torch.nn.Linear(16, 4), StepProfiler(None, enabled=True, publish=published.append), steps=3)
    assert published == []


def test_profile_steps_must_lie_within_the_run() -> None:
    assert TrainConfig(max_steps=10, profile_steps=(3, 5)).profile_steps == (3, 5)
    for steps in [(0, 2), (5, 3), (9, 11)]:
        with pytest.raises(ValueError, match="profile_steps"):
            TrainConfig(max_steps=10, profile_steps=steps)
