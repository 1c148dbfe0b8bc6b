"""A sharding job stopped from outside (SIGKILL or SIGTERM to its main process) leaves no process
behind: its pool workers and their prober children die with it, and nothing writes shards after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vidtx.config import SynthConfig
from vidtx.processes import TerminatedError, sigterm_raises
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


CHILD_STARTS = """
import os, sys
{import_line}
from vidtx.processes import forkserver_context

if __name__ == "__main__":
    context = forkserver_context()
    for _ in range(3):
        child = context.Process(target=os.getpid)
        child.start()
        child.join()
        assert child.exitcode == 0
"""


@pytest.mark.parametrize("run_as", ["script", "module"])
def test_forkserver_children_do_not_import_the_programs_modules_again(tmp_path: Path, run_as: str) -> None:
    """Every forkserver child re-runs the parent's main module; what that imports (torch, Prefect: up
    to 1.3 s) is imported once, by the server, not by each prober child or DataLoader worker."""
    imports = tmp_path / "imports.txt"
    (tmp_path / "heavy.py").write_text(
        f"import os\nopen({str(imports)!r}, 'a').write(f'{{os.getpid()}}\\n')\ndef main(): pass\n"
    )
    (tmp_path / "program.py").write_text(CHILD_STARTS.format(import_line="from heavy import main"))
    command = [sys.executable, "program.py"] if run_as == "script" else [sys.executable, "-m", "program"]
    result = subprocess.run(command, cwd=tmp_path, check=True, timeout=120, capture_output=True, text=True)
    importers = imports.read_text().split()
    assert len(importers) == 2, importers  # the program and its forkserver, none of the 3 children
    assert result.stderr == ""  # no warning from the children's re-run of the main module


class HandlerRan(BaseException):
    """What a SIGTERM handler installed before `sigterm_raises` raises (as Prefect's flow engine does)."""


def send_sigterm_to_self_and_wait() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler interrupts this


def stop_inside_then_fail_cleaning_up() -> None:
    with sigterm_raises():
        with pytest.raises(KeyboardInterrupt):
            send_sigterm_to_self_and_wait()
        raise AssertionError("a cleanup that raises is still reported as the stop")


def test_sigterm_raises_an_interrupt_inside_and_the_replaced_handlers_exception_outside() -> None:
    """Inside the block SIGTERM raises a KeyboardInterrupt (what Ray's `ray.get` stops on); leaving
    the block, TerminatedError, or what the handler it replaced raises; the handler is put back."""

    def handler(signum: int, frame: object) -> None:
        raise HandlerRan

    # the session's Ray driver has its own SIGTERM handler in this process: start from the default
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(TerminatedError, match="stopped by SIGTERM"):
            stop_inside_then_fail_cleaning_up()
        signal.signal(signal.SIGTERM, handler)
        with pytest.raises(HandlerRan), sigterm_raises():
            send_sigterm_to_self_and_wait()
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, previous)
