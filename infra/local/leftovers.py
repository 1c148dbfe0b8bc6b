"""What a command of ours started and left running: the test session, `make demo`, `make ui` and
`make stack` each mark their processes and check, when they end, that none of them is still alive.

A process is marked by a token in its environment (`VIDTX_OWNERS`, tokens joined by ':'), which every
process it starts inherits however deep (Ray's raylet and its workers, Prefect's and MLflow's
servers, flow-run processes, an S3 server, PostgreSQL), and keeps once its parent is gone: an orphan
reparented to init is found as surely as a child. Nested owners add their token (the test session's
stack is the session's too).

`python -m infra.local.leftovers run WHAT -- COMMAND...` runs a command marked and then checks it;
`python -m infra.local.leftovers check TOKEN WHAT` checks a token made earlier (`new-token`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys

import psutil

OWNERS_VARIABLE = "VIDTX_OWNERS"
EXIT_GRACE_S = 15.0  # what a marked process still has to end once its owner is done


def new_token(what: str) -> str:
    return f"{what.replace(' ', '-')}-{secrets.token_hex(6)}"


def marked(env: dict[str, str], token: str) -> dict[str, str]:
    """`env` with `token` added to the owners its processes carry."""
    owners = env.get(OWNERS_VARIABLE)
    return env | {OWNERS_VARIABLE: f"{owners}:{token}" if owners else token}


def owned_by(token: str) -> list[psutil.Process]:
    """Every process on this machine that carries `token`, but this one and its ancestors (the
    command that checks, and what runs it)."""
    spared = {os.getpid(), *(process.pid for process in psutil.Process().parents())}
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            owners = process.environ().get(OWNERS_VARIABLE, "")
            if (
                process.pid not in spared
                and token in owners.split(":")
                and process.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(process)
    return found


def left_running(token: str, grace: float = EXIT_GRACE_S) -> list[str]:
    """A line for each process carrying `token` still alive after `grace` s (pid, name, command,
    working folder); those are then killed, so that a failed check leaves nothing either."""
    _, alive = psutil.wait_procs(owned_by(token), timeout=grace)
    lines = []
    for process in alive:
        with contextlib.suppress(psutil.Error):
            command = " ".join(" ".join(process.cmdline()).split())[:200]
            lines.append(
                f"pid {process.pid} {process.name()} ({command}) in {process.cwd()}, parent {process.ppid()}"
            )
            process.kill()
    return lines


def report(token: str, what: str) -> int:
    """Print what `what` left running (an error line each) and return 1, else 0."""
    lines = left_running(token)
    for line in lines:
        print(f"error: {what} left a process running: {line}", file=sys.stderr)
    return 1 if lines else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "run" and argv[2] == "--":
        what, command = argv[1], argv[3:]
        token = new_token(what)
        status = subprocess.call(command, env=marked(dict(os.environ), token))
        return report(token, what) or status
    if len(argv) == 3 and argv[0] == "check":
        return report(argv[1], argv[2])
    if len(argv) == 2 and argv[0] == "new-token":
        print(new_token(argv[1]))
        return 0
    print("usage: python -m infra.local.leftovers run WHAT -- COMMAND... | check TOKEN WHAT | new-token WHAT")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
