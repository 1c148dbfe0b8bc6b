"""Ports for the local servers that the tests, benchmarks and `make stack` start (S3, the latency
proxy, MLflow, Prefect, PostgreSQL, Ray's nodes, a process group's rendezvous).

A port picked by binding port 0 and closing it lies in the kernel's ephemeral range, which every
outgoing connection of the machine draws from until the server binds it: a fresh-clone `make test`
lost its two-node cluster that way ("Failed to bind to address 127.0.0.1:44217", the head's Ray client
server). `free_port` picks below that range instead (Ray's worker ports, 10002-19999 by default, are
below `FIRST`), checks the port binds now, and holds a lock on it for the rest of this process, so no
other process that picks through here (a second pytest-xdist worker, a benchmark) is handed it too.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
from collections.abc import Sequence
from pathlib import Path

FIRST = 20000  # above Ray's worker ports and the services' well-known ones (5432, 6379, 8265, 9000)
LOCKS = Path(tempfile.gettempdir(), "vidtx-ports")
_held: list[int] = []  # the lock files' descriptors, kept open: a lock ends with its process


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default when unreadable)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def candidate_ports() -> Sequence[int]:
    """The ports `free_port` draws from: below the ephemeral range, or above it where that is wider."""
    low, high = ephemeral_range()
    below, above = range(FIRST, low), range(high + 1, 65536)
    ports = max(below, above, key=len)
    if len(ports) < 1000:
        raise RuntimeError(
            f"the ephemeral port range {low}-{high} leaves under 1,000 ports for local servers"
        )
    return ports


def free_port() -> int:
    """A port on 127.0.0.1 outside the ephemeral range, free now and handed out by no other live
    process through this function."""
    ports = candidate_ports()
    LOCKS.mkdir(exist_ok=True)
    for port in random.sample(ports, len(ports)):
        descriptor = os.open(LOCKS / str(port), os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another live process holds it
            os.close(descriptor)
            continue
        if _binds(port):
            _held.append(descriptor)
            return port
        os.close(descriptor)
    raise RuntimeError(f"no free port on 127.0.0.1 in {min(ports)}-{max(ports)}")


def _binds(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
