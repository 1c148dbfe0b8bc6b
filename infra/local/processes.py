"""The processes of `make stack`: each started in a session of its own, recorded in a pid file, waited
for over HTTP, and ended as a whole process tree (SIGTERM, then SIGKILL). The local servers of the
tests and benchmarks (S3, the latency proxy) are waited for on their port."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import psutil


def spawn(command: list[str], env: dict[str, str], log: Path, pidfile: Path) -> None:
    """Start `command` in a session of its own, output appended to `log`, its pid in `pidfile`."""
    with log.open("ab") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=output, start_new_session=True)
    pidfile.write_text(str(process.pid))


def wait_for_http(name: str, pidfile: Path, url: str, headers: dict[str, str] | None, timeout: float) -> None:
    """Until `url` answers; a process that exits first, or no answer in `timeout` s, is an error."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running(int(pidfile.read_text())):
            raise RuntimeError(f"{name} exited (see its log)")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=3):
                return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"{name} did not answer {url} in {timeout:.0f} s (see its log)")


def wait_for_port(port: int, process: subprocess.Popen, name: str, timeout: float) -> None:
    """Until 127.0.0.1:`port` accepts a connection; `process` exiting first, or `timeout` s without
    one, is an error naming `name`."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start on 127.0.0.1:{port}")
        time.sleep(0.05)


def end_tree(pid: int, *, kill: bool = False) -> None:
    """SIGTERM the process and everything below it (SIGKILL when `kill`); SIGKILL what is left after 20 s."""
    end_trees([pid], kill=kill)


def end_trees(pids: Sequence[int], *, kill: bool = False) -> None:
    """`end_tree` of each process, in the given order, with one wait for all of them: a service whose
    processes ignore SIGTERM (Ray's agents) costs the 20 s once, not once per service."""
    tree = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            tree += [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    _, alive = psutil.wait_procs(tree, timeout=20)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=10)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for_ray_nodes(address: str, count: int, logs: str, timeout: float = 180) -> None:
    """Until the Ray cluster at `address` (its dashboard) has `count` nodes alive."""
    from ray.util.state import list_nodes

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the state API is not up yet
            if sum(node.state == "ALIVE" for node in list_nodes(address=address)) == count:
                return
        time.sleep(1)
    raise RuntimeError(f"the Ray cluster has not {count} nodes after {timeout:.0f} s (see {logs})")
