"""DeepSpeed's op builds (issue 43 case 1): a DeepSpeed engine on CPUs compiles no op, a build lock left
by an interrupted build is removed with one warning, and a wait on a live build says whom it waits for.

The interrupted build is real: DeepSpeed's own builder of its shared-memory op, killed while it
compiles, in a TORCH_EXTENSIONS_DIR of the test's own."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.local.ports import free_port
from vidtx.train.op_builds import build_locks, lock_holders, settle_build_lock, settle_build_locks

LOGGER = "vidtx.train.op_builds"


def python(code: str, extensions: Path) -> subprocess.Popen:
    """`code` in a process (and session) of its own, building into `extensions`."""
    env = os.environ | {"TORCH_EXTENSIONS_DIR": str(extensions), "DS_ACCELERATOR": "cpu"}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, start_new_session=True)


def wait_for(condition: Callable[[], object], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def hold_lock(lock: Path, seconds: float, extensions: Path) -> subprocess.Popen:
    """A process that takes `lock` as torch's FileBaton does (created exclusively, held open), then
    releases it after `seconds`."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = python(
        f"""
        import os, time
        fd = os.open({str(lock)!r}, os.O_CREAT | os.O_EXCL)
        time.sleep({seconds})
        os.close(fd)
        os.remove({str(lock)!r})
        """,
        extensions,
    )
    wait_for(lambda: bool(lock_holders(lock)))
    return holder


@pytest.mark.slow
def test_a_deepspeed_engine_on_cpus_builds_no_op(tmp_path: Path) -> None:
    """DeepSpeed used to JIT-compile its shared-memory all-reduce (about a minute) at the first training
    of a machine, under the lock that an interrupted build left behind."""
    extensions = tmp_path / "extensions"
    engine = python(
        f"""
        import os, torch
        os.environ |= {{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "{free_port()}", "RANK": "0", "WORLD_SIZE": "1",
                        "LOCAL_RANK": "0"}}
        from vidtx.train.accelerator import import_deepspeed
        deepspeed = import_deepspeed()
        model = torch.nn.Linear(4, 2)
        engine, *_ = deepspeed.initialize(
            model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), config={{"train_batch_size": 2}}
        )
        loss = engine(torch.ones(2, 4)).sum()
        engine.backward(loss)
        engine.step()
        """,
        extensions,
    )
    assert engine.wait(timeout=300) == 0
    assert not extensions.exists() or not any(extensions.iterdir())  # nothing was built


@pytest.mark.slow
def test_the_lock_of_an_interrupted_build_is_removed_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    extensions = tmp_path / "extensions"
    builder = python(
        """
        from deepspeed.accelerator import get_accelerator
        get_accelerator().create_op_builder("ShareMemCommBuilder").load()
        """,
        extensions,
    )
    lock = extensions / "deepspeed_shm_comm" / "lock"
    wait_for(lambda: bool(lock.exists() and lock_holders(lock)) or builder.poll() is not None)
    os.killpg(builder.pid, signal.SIGKILL)  # a killed test, a machine's reboot: the build stops half way
    builder.wait()
    assert lock.exists()  # what every later training used to wait on for ever

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    assert build_locks() == [lock]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        settle_build_locks()
    assert not lock.exists()
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        f"removed {lock}: the build of DeepSpeed's op deepspeed_shm_comm that held it is gone "
        "(interrupted); the op is built again when it is needed"
    ]


def test_a_wait_on_a_live_build_says_whom_it_waits_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lock = tmp_path / "extensions" / "fused_adam" / "lock"
    holder = hold_lock(lock, 3.0, tmp_path / "extensions")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        settle_build_lock(lock, poll_s=0.1)
    assert holder.wait(timeout=30) == 0  # the build released it: nothing was removed from under it
    (waiting,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert waiting.startswith(f"waiting for pid {holder.pid} (")
    assert f"to finish building DeepSpeed's op fused_adam (it holds {lock}; 0 s so far)" in waiting


def test_a_build_killed_during_the_wait_has_its_lock_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lock = tmp_path / "extensions" / "py311_cpu" / "fused_adam" / "lock"
    holder = hold_lock(lock, 300.0, tmp_path / "extensions")
    assert build_locks(tmp_path / "extensions") == [lock]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        started = time.monotonic()
        killer = subprocess.Popen(["sh", "-c", f"sleep 2; kill -9 {holder.pid}"])
        settle_build_lock(lock, poll_s=0.1)
    killer.wait()
    assert time.monotonic() - started < 30
    assert not lock.exists()
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert [m.split(" ")[0] for m in messages] == ["waiting", "removed"]
