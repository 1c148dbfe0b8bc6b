"""The local servers' ports (`infra/local/ports.py`): outside the kernel's ephemeral range, free when
handed out, and never handed to two live processes."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infra.local import ports
from infra.local.ports import ephemeral_range, free_port


def test_ports_lie_outside_the_ephemeral_range_and_bind() -> None:
    low, high = ephemeral_range()
    picked = [free_port() for _ in range(50)]
    assert len(set(picked)) == 50
    assert not [port for port in picked if low <= port <= high]
    for port in picked:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_a_port_another_live_process_holds_is_never_handed_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two processes drawing from the same 12 ports, with locks of their own: the second gets exactly
    the 6 the first does not hold, then none. (The 12 are this process's already, so no other process
    of the machine binds them meanwhile.)"""
    pool = [free_port() for _ in range(12)]
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import pathlib
            import sys
            from infra.local import ports
            ports.candidate_ports = lambda: {pool}
            ports.LOCKS = pathlib.Path({str(tmp_path)!r})
            print(*[ports.free_port() for _ in range(6)], flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        held = {int(port) for port in holder.stdout.readline().split()}
        monkeypatch.setattr(ports, "candidate_ports", lambda: pool)
        monkeypatch.setattr(ports, "LOCKS", tmp_path)
        mine = {free_port() for _ in range(6)}
        assert mine == set(pool) - held
        with pytest.raises(RuntimeError, match="no free port"):
            free_port()
    finally:
        holder.communicate("")
