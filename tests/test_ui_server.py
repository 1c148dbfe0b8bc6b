"""The MLflow UI as `make ui` serves it (`mlflow ui --app-name vidtx`, vidtx/tracking/ui_server.py):
MLflow's page with the model-training defaults first in its head, everything else as MLflow serves it.
(Clicking a run keeps the model-training view, in a browser: tests/test_ui.py.)"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from flask import Flask
from ui_stack import pipeline_config, run_deployment, settings, started_stack

from infra.local.ports import free_port
from infra.local.processes import wait_for_port
from vidtx.tracking.ui_server import DEFAULTS_SCRIPT, with_browser_defaults

ROOT = Path(__file__).resolve().parent.parent
HEARTBEATS_AFTER_A_RUN_S = 20  # Prefect's worker beats every 30 s (its channel's own beat: every 10 s)


def test_the_page_gets_the_defaults_first_in_its_head_and_nothing_else_changes() -> None:
    app = Flask(__name__)
    app.add_url_rule("/", "index", lambda: "<html><head><title>MLflow</title></head></html>")
    app.add_url_rule("/api", "api", lambda: {"head": "<head>"})
    app.after_request(with_browser_defaults)
    client = app.test_client()
    assert client.get("/").text == f"<html><head>{DEFAULTS_SCRIPT}<title>MLflow</title></head></html>"
    assert client.get("/api").json == {"head": "<head>"}
    assert "machine_learning" in DEFAULTS_SCRIPT
    assert "localStorage.getItem(key) === null" in DEFAULTS_SCRIPT  # a browser's own choice is kept


@pytest.mark.slow
def test_mlflow_ui_with_vidtx_s_app_serves_its_page_with_the_defaults(tmp_path: Path) -> None:
    port = free_port()
    command = [str(Path(sys.executable).parent / "mlflow"), "ui", "--app-name", "vidtx", "--host", "127.0.0.1",
               "--port", str(port), "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--workers", "1"]  # fmt: skip
    with (tmp_path / "ui.log").open("wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        wait_for_port(port, server, "mlflow ui --app-name vidtx", timeout=120)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            html = page.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as health:
            assert health.read() == b"OK"
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert html.startswith(f'<!doctype html><html lang="en"><head>{DEFAULTS_SCRIPT}<meta charset="utf-8"/>')


@pytest.mark.slow
def test_a_training_run_through_make_ui_logs_no_error_on_its_prefect_server(tmp_path: Path) -> None:
    """`make ui`'s Prefect server (SQLite) logged an ERROR with a traceback ("Worker channel heartbeat
    persistence failed ... database is locked") the moment a `train-model` run finished: its log
    after a run, and after `make ui-stop`, holds no error."""
    from vidtx.shard.synthetic import generate_dataset
    from vidtx.stages.shard import shard_dataset

    with started_stack(tmp_path) as stack:
        config = pipeline_config(tmp_path / "run", stack.env["MLFLOW_DB"])
        generate_dataset(config.synth)
        shard_dataset(config.shard)
        config.data.shards = config.shard.output
        run_deployment(stack, "train-model/local", settings(config, tmp_path))
        time.sleep(HEARTBEATS_AFTER_A_RUN_S)  # the worker's heartbeats go on over the run's last writes
        server_log = (stack.state / "prefect-server.log").read_text()
    errors = [line for line in server_log.splitlines() if " ERROR " in line or "Traceback" in line]
    assert errors == [], "\n".join(errors)


async def _a_read_then_a_write_while_another_connection_writes(database: Path) -> None:
    """What Prefect's worker-channel heartbeat does on SQLite: one transaction reads, and writes after
    another connection has committed a write (a flow run's final state, at the same moment)."""
    import asyncio

    import sqlalchemy as sa
    from prefect.server.database.configurations import AioSqliteConfiguration

    config = AioSqliteConfiguration(connection_url=f"sqlite+aiosqlite:///{database}")
    engine = await config.engine()
    async with engine.begin() as connection:
        await connection.execute(sa.text("CREATE TABLE beats (name TEXT)"))
    read = asyncio.Event()

    async def heartbeat() -> None:
        async with await config.session(engine) as session, config.begin_transaction(session):
            await session.execute(sa.text("SELECT count(*) FROM beats"))
            read.set()
            await asyncio.sleep(0.5)  # the other connection writes meanwhile
            await session.execute(sa.text("INSERT INTO beats VALUES ('worker')"))

    async def final_state() -> None:
        await read.wait()
        async with (
            await config.session(engine) as session,
            config.begin_transaction(session, with_for_update=True),
        ):
            await session.execute(sa.text("INSERT INTO beats VALUES ('flow run')"))

    try:
        await asyncio.gather(heartbeat(), final_state())
    finally:
        await engine.dispose()


def test_make_uis_prefect_server_takes_sqlites_write_lock_when_a_transaction_begins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cause of `make ui`'s "database is locked" ERROR, as Prefect's own SQLite configuration
    meets it, and the server `ui.sh` starts (`infra.local.prefect_server`) without it."""
    import asyncio

    from prefect.server.database.configurations import AioSqliteConfiguration

    from infra.local.prefect_server import take_the_write_lock_first

    with pytest.raises(Exception, match="database is locked"):  # Prefect's DEFERRED transaction
        asyncio.run(_a_read_then_a_write_while_another_connection_writes(tmp_path / "deferred.db"))
    monkeypatch.setattr(AioSqliteConfiguration, "begin_transaction", AioSqliteConfiguration.begin_transaction)
    take_the_write_lock_first()
    asyncio.run(_a_read_then_a_write_while_another_connection_writes(tmp_path / "immediate.db"))
    assert "infra.local.prefect_server" in (ROOT / "infra/local/ui.sh").read_text()
