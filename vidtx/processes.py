"""Child processes that never outlive the job that started them, and SIGTERM as a clean stop.

A sharding job runs pool workers, and each worker a prober child (through forkserver, so the
forkserver process is their parent). If the job is killed, nothing tells those children: the
issue that found it saw six workers writing shards a minute after `kill -9`. Linux's
`PR_SET_PDEATHSIG` does: a child that calls `die_with_parent()` gets SIGKILL when its parent exits,
and a forkserver exits as soon as the process that owns it does, so the kill cascades down the
tree. `sigterm_raises()` turns SIGTERM into an exception in the main thread, so `with` blocks
(process pools included) unwind and stop their children instead of the interpreter vanishing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class TerminatedError(Exception):
    """The process received SIGTERM."""


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent exits (no-op elsewhere). `parent_pid`: the
    parent it expects; if that one is already gone, exit now."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before the request took effect


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises `TerminatedError` in the main thread (elsewhere: no change)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise TerminatedError(f"stopped by {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigterm_deferred() -> Iterator[None]:
    """Hold SIGTERM back (this thread) until the block ends. For starting a child: a parent killed
    halfway through the handshake leaves the child to die on a half-read pipe with a traceback."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
