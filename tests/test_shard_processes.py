"""A sharding job stopped from outside (SIGKILL or SIGTERM to its main process) leaves no process
behind: its pool workers and their prober children die with it, and nothing writes shards after."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vidtx.config import SynthConfig
from vidtx.shard.synthetic import generate_dataset


def session_processes(session: int) -> list[int]:
    """Live (not zombie) processes of a session, from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, _, sid = stat.read_text().rsplit(")", 1)[1].split()[:4]
        except (OSError, ValueError):
            continue
        if int(sid) == session and state != "Z":
            pids.append(int(stat.parent.name))
    return pids


def written(folder: Path) -> dict[str, int]:
    return {path.name: path.stat().st_mtime_ns for path in folder.glob("*") if path.is_file()}


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_stopping_the_shard_job_stops_its_workers_and_probers(tmp_path: Path, stop: signal.Signals) -> None:
    annotations = generate_dataset(
        SynthConfig(
            output=tmp_path / "videos",
            classes=["moving_up", "moving_down"],
            videos_per_class={"train": 40},
            num_frames=32,
            size=64,
        )
    )
    output = tmp_path / "shards"
    options = [
        "max_samples_per_shard=2",
        "processes=2",
        "reencode.short_side=32",
        "reencode.keyframe_interval=4",
    ]
    command = [sys.executable, "-m", "vidtx", "shard", str(annotations), str(output)]
    job = subprocess.Popen(
        [*command, *(f"--set=shard.{option}" for option in options)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the job and every process it starts share the session id job.pid
    )
    deadline = time.monotonic() + 120
    while not list(output.glob("*.stats.json")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(session_processes(job.pid)) >= 4, "the job, its forkserver, workers and probers"
    job.send_signal(stop)
    _, stderr = job.communicate(timeout=60)

    deadline = time.monotonic() + 15
    while session_processes(job.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert session_processes(job.pid) == []
    before = written(output)
    time.sleep(2)
    assert written(output) == before, "nothing writes shards after the job stopped"
    assert len([name for name in before if name.endswith(".stats.json")]) < 40
    if stop == signal.SIGTERM:
        assert job.returncode == 128 + signal.SIGTERM
        assert "Traceback" not in stderr, stderr
        assert "stopped by SIGTERM" in stderr
