"""Child processes that never outlive the process that started them, and SIGTERM as a clean stop.

A sharding job's pool workers, each worker's prober child and a training process's DataLoader
workers all start through forkserver (`forkserver_context`); the job's forkserver forks the
workers, and each worker starts a forkserver of its own for its probers. If the job is killed
outright, nothing tells those children. Their parent-death signal (`PR_SET_PDEATHSIG`, used before)
waits for their parent, a forkserver, which exits only once every copy of its "alive" pipe is
closed; CPython gives one to each child it forks, so after `kill -9 vidtx shard` the servers stayed,
and the workers re-encoded on, finished and renamed their shards, then died on a BrokenPipeError
(DataLoader workers: never). Closing those copies lets the signal come, but only once the server has
shut its interpreter down (0.4 s idle, with torch imported; over a second on a busy machine), time
in which a worker still finishes a shard.

So every process of a `forkserver_context` (`_JobProcess`, whoever starts it: a Pool, torch's
DataLoader) watches the process that started it, through the sentinel of
`multiprocessing.parent_process()` (a pipe whose other end only that process holds). When that is
gone, a thread SIGKILLs the child's own children and `os._exit`s: no shard is finished, nothing is
printed. The thread needs the GIL, which the decoders let go of often (every 50 ms at worst while
re-encoding on a busy machine). The idle forkservers exit by themselves once no child holds their
pipe: after their interpreter's shutdown, half a second each when the machine is idle.

`sigterm_raises()` turns SIGTERM into an exception in the main thread, so `with` blocks (process
pools included) unwind and stop their children instead of the interpreter vanishing.

`peak_rss_mb()` is a process's own peak memory: `ru_maxrss` is not, in a child, since it starts
from the peak of the parent that forked it (Linux folds the parent's high-water mark in at exec).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import types
from collections.abc import Iterator
from multiprocessing.connection import wait
from multiprocessing.context import ForkServerContext, ForkServerProcess
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started its program, MB (VmHWM)."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024  # "VmHWM:   123456 kB"


class TerminatedError(Exception):
    """The process received SIGTERM."""


def stopped_from_outside(err: BaseException) -> bool:
    """Whether `err` means the work was stopped (SIGTERM, Ctrl-C, a Prefect cancellation), not failed."""
    return isinstance(err, TerminatedError) or not isinstance(err, Exception)


def what_stopped(err: BaseException) -> str:
    """What the stopped work said it left behind, for the one line a person reads about the stop.

    The work adds it to the exception as a note on the way up (`training demo-1 stopped: Ray shut
    down, MLflow run ... ended KILLED`), so the exception keeps its type: Prefect's engine must still
    see its own `TerminationSignal`. Without a note: the exception's text (`stopped by SIGTERM`)."""
    notes = getattr(err, "__notes__", None)
    return notes[-1] if notes else str(err) or type(err).__name__


def _exit_with_parent(parent: BaseProcess) -> None:
    """Wait for `parent` to exit, then SIGKILL this process's children and exit at once."""
    wait([parent.sentinel])
    for child in multiprocessing.active_children():
        child.kill()
    os._exit(1)


class _JobProcess(ForkServerProcess):
    """A forkserver child that dies, with its own children, as soon as the process that started it
    is gone (see the module's docstring)."""

    def run(self) -> None:
        parent = multiprocessing.parent_process()
        assert parent is not None  # a started child always has one
        threading.Thread(target=_exit_with_parent, args=(parent,), name="vidtx-parent", daemon=True).start()
        super().run()


class _JobContext(ForkServerContext):
    Process = _JobProcess


_CONTEXT = _JobContext()


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
    """Hold SIGTERM back until the block ends, then act on it. For starting a child: a parent killed
    halfway through the handshake leaves the child to die on a half-read pipe with a traceback.

    In the main thread, a handler that notes the signal: blocking it in this thread's signal mask
    is not enough, as the kernel hands a signal sent to the process to any thread not blocking it
    (the parent watcher, a thread an import started), and its default action ends the process.
    Elsewhere, where no handler can be set, the mask is the best there is."""
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None or threading.current_thread() is not threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        return
    received: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if received:
            signal.raise_signal(signal.SIGTERM)


def forkserver_context(*preload: str) -> ForkServerContext:
    """The forkserver start method (children start clean: no decoder or thread state inherited),
    with `preload` and what the program's main module needs imported once, by the server.

    A forkserver child first re-runs the parent's main module (as `__mp_main__`). For the `vidtx`
    command that imports the CLI and its config models (~0.1 s); under `python -m benchmarks.run` or
    a Prefect flow run it is torch, Prefect and the rest (~1.3 s), paid again by every prober child
    and DataLoader worker. With those modules already in the server, a child starts in ~10 ms.
    The server starts once per process: the preload of the first call to start it is the one used.
    Its processes die with the process that calls this (see the module's docstring)."""
    _CONTEXT.set_forkserver_preload([__name__, *preload, *_main_imports()])
    return _CONTEXT


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
