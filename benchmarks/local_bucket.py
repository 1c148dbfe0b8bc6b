"""The benchmarks' bucket: SeaweedFS on 127.0.0.1 (`infra/local/s3_server.py`) with one bucket, the
AWS_* variables of its keys set for the block, and its requests recorded by the latency proxy at
no delay (`AWS_ENDPOINT_URL` is that recorder; `requests(log, mark)` reads what it forwarded).

`pin()` puts the server, the recorder and any latency proxy on CPU 0 and this process on the others,
so that a figure of the loader is the loader's and not the test server's (2 cores here). It pins
every thread of each process (`taskset -a`): an affinity set on a pid binds that one thread, and
SeaweedFS's Go runtime, like this process's thread pools, already runs many; threads started later
inherit their creator's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import psutil

from infra.local.latency_proxy import latency_proxy
from infra.local.ports import free_port
from infra.local.s3_server import SeaweedFS, create_bucket, s3_server

KEYS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
SERVER_CPU = 0


@dataclasses.dataclass
class LocalBucket:
    url: str  # s3://name
    server: SeaweedFS
    log: Path  # the recorder's request log

    def server_processes(self) -> list[psutil.Process]:
        """SeaweedFS's two processes and every proxy this process started (all on the server's core)."""
        proxies = [
            child
            for child in psutil.Process().children(recursive=True)
            if "infra.local.latency_proxy" in " ".join(child.cmdline())
        ]
        return [psutil.Process(p.pid) for p in self.server.processes.values()] + proxies

    def server_cpu(self) -> float:
        """CPU seconds the server's processes have used so far."""
        return sum(sum(process.cpu_times()[:2]) for process in self.server_processes())

    def pin(self) -> dict[str, list[int]]:
        """Every thread of the server's processes on CPU 0, every thread of this process on the
        others; returns the CPUs each now runs on (checked over all its threads)."""
        cpus = os.sched_getaffinity(0) | {SERVER_CPU}
        for process in self.server_processes():
            pin_threads(process.pid, {SERVER_CPU})
        if len(cpus) > 1:
            pin_threads(os.getpid(), cpus - {SERVER_CPU})
        return {
            f"{process.pid} {' '.join(process.cmdline()[:4])}": sorted(thread_cpus(process.pid))
            for process in [psutil.Process(), *self.server_processes()]
        }


def pin_threads(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` on `cpus` (passes until none was left: a thread may start while
    the others are pinned, from one not yet pinned)."""
    for _ in range(10):
        moved = False
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):  # the thread ended
                if os.sched_getaffinity(int(task.name)) != cpus:
                    os.sched_setaffinity(int(task.name), cpus)
                    moved = True
        if not moved:
            return
    raise RuntimeError(f"process {pid} kept starting threads on other CPUs than {sorted(cpus)}")


def thread_cpus(pid: int) -> set[int]:
    """The CPUs any thread of process `pid` may run on."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            found |= os.sched_getaffinity(int(task.name))
    return found


@contextlib.contextmanager
def local_bucket(work: Path, name: str) -> Iterator[LocalBucket]:
    """SeaweedFS with its data under `work`, bucket `name`, for the block (the CPU affinity of this
    process's threads restored after)."""
    affinity = os.sched_getaffinity(0)
    gateway, recorder = free_port(), free_port()
    endpoint = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{recorder}"}
    log = work / "s3-requests.log"
    with (
        mock.patch.dict(os.environ, KEYS | endpoint),
        s3_server(
            work / "seaweedfs", gateway, {KEYS["AWS_ACCESS_KEY_ID"]: KEYS["AWS_SECRET_ACCESS_KEY"]}
        ) as server,
        latency_proxy(recorder, gateway, 0, log=log),
    ):
        try:
            yield LocalBucket(create_bucket(server.endpoint, name), server, log)
        finally:
            pin_threads(os.getpid(), affinity)
