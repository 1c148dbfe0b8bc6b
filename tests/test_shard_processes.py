"""A process stopped from outside (SIGKILL or SIGTERM) leaves no process behind: a sharding job's pool
workers and their prober children, or a reader's DataLoader workers, stop with it, and nothing
writes shards after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from vidtx.config import SynthConfig
from vidtx.processes import TerminatedError, forkserver_context, sigterm_deferred, sigterm_raises
from vidtx.shard.synthetic import generate_dataset


def session_processes(session: int) -> dict[int, int]:
    """Live (not zombie) processes of a session, from /proc: pid -> parent pid."""
    processes = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, parent, _, sid = stat.read_text().rsplit(")", 1)[1].split()[:4]
        except (OSError, ValueError):
            continue
        if int(sid) == session and state != "Z":
            processes[int(stat.parent.name)] = int(parent)
    return processes


def forked(session: int) -> list[int]:
    """The processes of a session whose parent is in it too. Once the job is gone: its workers and
    probers (forked by its forkservers), not the idle forkservers and the resource tracker, whose
    parent died and which exit as soon as their interpreter has shut down (seconds, with torch loaded
    and a busy machine)."""
    processes = session_processes(session)
    return [pid for pid, parent in processes.items() if parent in processes]


def gone_within(seconds: float, processes: Callable[[], object]) -> bool:
    deadline = time.monotonic() + seconds
    while processes() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not processes()


def finished(folder: Path) -> dict[str, int]:
    """The shards and manifests in place (what a finished shard or split renames into the folder)."""
    done = [path for pattern in ("*.tar", "*.stats.json", "*.manifest.json") for path in folder.glob(pattern)]
    return {path.name: path.stat().st_mtime_ns for path in done}


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_stopping_the_shard_job_stops_its_workers_and_probers(tmp_path: Path, stop: signal.Signals) -> None:
    """Stopped while both workers re-encode (each video takes over a second: 64 frames re-encoded as
    1280, all keyframes), no process of the job is left within seconds, and no shard is finished."""
    annotations = generate_dataset(
        SynthConfig(
            output=tmp_path / "videos",
            classes=["moving_up", "moving_down"],
            videos_per_class={"train": 2},
            num_frames=64,
            size=256,
        )
    )
    output = tmp_path / "shards"
    options = [
        "max_samples_per_shard=2",
        "processes=2",
        "reencode.short_side=256",
        "reencode.fps=240",
        "reencode.keyframe_interval=1",
    ]
    command = [sys.executable, "-m", "vidtx", "shard", str(annotations), str(output)]
    stderr = tmp_path / "stderr.txt"
    job = subprocess.Popen(
        [*command, *(f"--set=shard.{option}" for option in options)],
        stdout=subprocess.DEVNULL,
        stderr=stderr.open("w"),
        start_new_session=True,  # the job and every process it starts share the session id job.pid
    )
    # the job, its resource tracker and forkserver, 2 workers, their forkservers and probers
    deadline = time.monotonic() + 60
    while len(session_processes(job.pid)) < 9 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # both probers are re-encoding their first video
    assert len(list(output.glob("*.tar.tmp"))) == 2, "both shards are being written"
    before = finished(output)
    job.send_signal(stop)
    job.wait(timeout=30)

    assert gone_within(2, lambda: forked(job.pid)), "the workers and probers stop with the job"
    assert gone_within(20, lambda: session_processes(job.pid)), "no process of the job is left"
    assert finished(output) == before, "no shard finished after the job stopped"
    assert "Traceback" not in stderr.read_text(), stderr.read_text()
    if stop == signal.SIGTERM:
        assert job.returncode == 128 + signal.SIGTERM
        assert "stopped by SIGTERM" in stderr.read_text()


ENDLESS_LOADER = """
import itertools, time
import torch
from vidtx.processes import forkserver_context

class Endless(torch.utils.data.IterableDataset):
    def __iter__(self):
        for index in itertools.count():
            time.sleep(0.01)
            yield index

if __name__ == "__main__":
    loader = torch.utils.data.DataLoader(Endless(), num_workers=2, multiprocessing_context=forkserver_context())
    for batch in loader:
        print(batch.item(), flush=True)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_dataloader_workers_die_with_the_process_that_reads_them(tmp_path: Path) -> None:
    """A reading process killed outright leaves no DataLoader worker (they ran on for ever: torch's
    watchdog checks their parent, the forkserver, which their copies of its pipe kept alive)."""
    (tmp_path / "program.py").write_text(ENDLESS_LOADER)
    job = subprocess.Popen(
        [sys.executable, "program.py"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    job.stdout.readline()  # both workers are running
    assert len(forked(job.pid)) >= 3, "the program's forkserver and its 2 workers"
    job.kill()
    job.wait(timeout=30)
    assert gone_within(2, lambda: forked(job.pid)), "the workers stop with the process"
    assert gone_within(20, lambda: session_processes(job.pid)), "no process is left"


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


def hold_sigterm_back_while_asked(connection: Connection) -> None:
    with sigterm_deferred():
        connection.send("holding")
        connection.recv()  # sent after the SIGTERM
        connection.send("still here")
    time.sleep(30)  # the SIGTERM held back ends the process here


def test_a_forkserver_child_holds_sigterm_back_while_it_asks_to() -> None:
    """A SIGTERM to a forkserver child inside `sigterm_deferred` waits for the block's end. Was: its
    parent-watching thread took the signal at once, so a pool stopped while a worker started its
    prober left the prober's server printing a traceback."""
    context = forkserver_context()
    ours, theirs = context.Pipe()
    child = context.Process(target=hold_sigterm_back_while_asked, args=(theirs,))
    child.start()
    theirs.close()  # a child that dies: an EOFError here, not a wait for ever
    assert ours.recv() == "holding"
    child.terminate()
    ours.send("go on")
    assert ours.recv() == "still here"
    child.join(timeout=30)
    assert child.exitcode == -signal.SIGTERM


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
