"""DeepSpeed's JIT-compiled C++ ops: the one training on CPUs does not need, and the build locks that
an interrupted build leaves behind.

DeepSpeed compiles an op the first time it loads it, under torch's `FileBaton`: a file `lock` in the
op's build folder (`$TORCH_EXTENSIONS_DIR/<op>/`, else `~/.cache/torch_extensions/py311_cpu/<op>/`),
created and held open by the building process and removed when it is done. A build killed in
between (Ctrl-C, a cancelled flow, a killed test) leaves the file, and every later load of the op
waits for it to go, for ever and without a word. Before DeepSpeed starts, `settle_build_locks` removes
a lock that no process holds open any more (one warning) and waits, saying for whom, on one that a
live build holds. On a cluster whose nodes share a home folder, give each node its own
`TORCH_EXTENSIONS_DIR`: a build on another machine holds its lock where this one cannot see it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from types import ModuleType

import psutil

log = logging.getLogger(__name__)

# DeepSpeed builds its shared-memory all-reduce for the CPU accelerator when its communication backend
# starts (a minute's compile on 2 cores). Only DeepSpeed-Inference's `inference_all_reduce` calls it;
# training's collectives go through torch.distributed (gloo) whether it is built or not.
UNUSED_CPU_OPS = ("deepspeed_shm_comm",)
REPEAT_WAITING_S = 60.0


def skip_unused_ops(deepspeed: ModuleType) -> None:
    """Tell DeepSpeed not to build the ops training does not call (on the CPU accelerator)."""
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() == "cpu":
        # DeepSpeed builds an op only if this table (probed once per process) says it can.
        compatible = deepspeed.ops.__compatible_ops__
        compatible.update(dict.fromkeys(UNUSED_CPU_OPS, False))


def extensions_root() -> Path:
    """Where torch builds C++ extensions (what `torch.utils.cpp_extension` uses)."""
    from torch.utils.cpp_extension import get_default_build_root

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())


def build_locks(root: Path | None = None) -> list[Path]:
    """The build locks present: `<root>/<op>/lock` (TORCH_EXTENSIONS_DIR) or `<root>/<python_build>/<op>/lock`."""
    root = root or extensions_root()
    return sorted([*root.glob("*/lock"), *root.glob("*/*/lock")])


def lock_holders(lock: Path) -> list[psutil.Process]:
    """The processes that have `lock` open: the build that created it, if it is still running."""
    holders = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if any(Path(file.path) == lock for file in process.open_files()):
                holders.append(process)
    return holders


def _describe(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return f"pid {process.pid} ({' '.join(process.cmdline())[:200]})"
    return f"pid {process.pid}"


def settle_build_lock(lock: Path, poll_s: float = 1.0) -> None:
    """Return once `lock` is gone: removed by its build, or by this function when its builder is gone."""
    waiting_since = said_at = None
    while lock.exists():
        holders = lock_holders(lock)
        if not holders:
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
                log.warning(
                    "removed %s: the build of DeepSpeed's op %s that held it is gone (interrupted); "
                    "the op is built again when it is needed",
                    lock,
                    lock.parent.name,
                )
            return
        now = time.monotonic()
        waiting_since = waiting_since or now
        if said_at is None or now - said_at >= REPEAT_WAITING_S:
            log.warning(
                "waiting for %s to finish building DeepSpeed's op %s (it holds %s; %.0f s so far)",
                ", ".join(_describe(process) for process in holders),
                lock.parent.name,
                lock,
                now - waiting_since,
            )
            said_at = now
        time.sleep(poll_s)


def settle_build_locks() -> None:
    """Every build lock of this machine's torch extensions settled (`settle_build_lock`)."""
    for lock in build_locks():
        settle_build_lock(lock)
