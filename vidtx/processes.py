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
import multiprocessing
import os
import signal
import sys
import threading
import types
from collections.abc import Iterator
from multiprocessing.context import ForkServerContext
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
    """Within the block, SIGTERM stops the main thread (elsewhere: no change) with `TerminatedError`,
    or with what the handler it replaces raises (Prefect's flow engine: `TerminationSignal`).

    The handler raises a KeyboardInterrupt, the one exception that blocking extension calls stop on
    (Ray's `ray.get` swallows any other until the call returns, for a training: at its end); once the
    block has unwound, the replaced handler is called, or `TerminatedError` raised."""
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN or threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[signal.Signals] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        received.append(signal.Signals(signum))
        raise KeyboardInterrupt(f"stopped by {received[0].name}")

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except BaseException:
        if not received:
            raise
        if callable(previous):
            previous(received[0], None)
        raise TerminatedError(f"stopped by {received[0].name}") from None
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


def forkserver_context(*preload: str) -> ForkServerContext:
    """The forkserver start method (children start clean: no decoder or thread state inherited),
    with `preload` and what the program's main module needs imported once, by the server.

    A forkserver child first re-runs the parent's main module (as `__mp_main__`). For the `vidtx`
    command that imports the CLI and its config models (~0.1 s); under `python -m benchmarks.run` or
    a Prefect flow run it is torch, Prefect and the rest (~1.3 s), paid again by every prober child
    and DataLoader worker. With those modules already in the server, a child starts in ~10 ms.
    The server starts once per process: the preload of the first call to start it is the one used."""
    context = multiprocessing.get_context("forkserver")
    assert isinstance(context, ForkServerContext)
    context.set_forkserver_preload([*preload, *_main_imports()])
    return context


def _main_imports() -> list[str]:
    """The modules the program's main module imported at its top level. Preloaded, they make each
    child's re-run of it cheap. Not the main module itself: CPython's forkserver cannot preload a
    script run by path (it never receives the path), and a module run with `-m` that the server
    imported is re-run by every child with a RuntimeWarning."""
    main = sys.modules.get("__main__")
    imported = (
        value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        for value in vars(main).values()
    )
    return sorted({name for name in imported if name in sys.modules and name not in ("__main__", "builtins")})
