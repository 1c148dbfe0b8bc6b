"""The MLflow UI as `make ui` serves it (`mlflow ui --app-name vidtx`, vidtx/tracking/ui_server.py):
MLflow's page with the model-training defaults first in its head, everything else as MLflow serves it.
(Clicking a run keeps the model-training view, in a browser: tests/test_ui.py.)"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from flask import Flask

from infra.local.ports import free_port
from infra.local.processes import wait_for_port
from vidtx.tracking.ui_server import DEFAULTS_SCRIPT, with_browser_defaults


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
