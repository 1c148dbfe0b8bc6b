"""`prefect server start` for `make ui`, on SQLite, with every write transaction taking the database's
write lock when it begins.

Prefect opens its SQLite transactions DEFERRED unless the caller asks `with_for_update`, and the
worker channel's heartbeat (Prefect 3.9) reads its work pool, then writes the worker's heartbeat, in
one such transaction. In WAL mode a transaction that read before another connection committed a
write cannot then write: SQLite answers "database is locked" at once, without waiting out the busy
timeout. The moment a flow run finishes, its final states, logs and events are such writes, and the
server logged `Worker channel heartbeat persistence failed ... sqlite3.OperationalError: database is
locked` with a traceback, and closed the worker's channel. BEGIN IMMEDIATE takes the lock first, so a
transaction waits (up to Prefect's busy timeout, 60 s) instead of failing. PostgreSQL (`make stack`)
has no such upgrade and runs Prefect's own server unchanged.

`python -m infra.local.prefect_server ARGS...` takes `prefect server start`'s arguments.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any


def take_the_write_lock_first() -> None:
    """Make Prefect's SQLite configuration begin each transaction IMMEDIATE (see the module docstring)."""
    from prefect.server.database.configurations import AioSqliteConfiguration

    begin = AioSqliteConfiguration.begin_transaction

    @contextlib.asynccontextmanager
    async def immediate(
        self: AioSqliteConfiguration, session: Any, with_for_update: bool = False
    ) -> AsyncIterator[Any]:
        async with begin(self, session, with_for_update=True) as transaction:
            yield transaction

    AioSqliteConfiguration.begin_transaction = immediate  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    from prefect.cli import app

    take_the_write_lock_first()
    sys.argv = ["prefect", "server", "start", *argv]  # Prefect's entry point reads its arguments there
    app()


if __name__ == "__main__":
    main(sys.argv[1:])
