"""`make ui` for tests: `infra/local/ui.sh start` on free ports and a state of its own, `ui.sh stop`
after; for tests/test_ui.py (the UIs in a browser) and tests/test_reliability.py (its sockets).

Imported as `from ui_stack import ...` (tests/ is on sys.path under pytest, see media.py).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
from demo_config import config_file, shrunk_demo_config

from infra.local.ports import free_port
from vidtx.config import PipelineConfig

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

ROOT = Path(__file__).resolve().parent.parent


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Stack:
    prefect_url: str
    mlflow_url: str
    ports: tuple[int, int]
    state: Path
    env: dict[str, str]
    printed: str  # what `ui.sh start` printed

    @contextlib.contextmanager
    def prefect(self) -> Iterator[SyncPrefectClient]:
        """A client of this stack's Prefect server."""
        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with (
            temporary_settings({PREFECT_API_URL: f"{self.prefect_url}/api"}),
            get_client(sync_client=True) as client,
        ):
            yield client

    def deployment_id(self, name: str) -> str:
        """The id of deployment `name` (`flow/deployment`) on this stack's Prefect server."""
        with self.prefect() as client:
            return str(client.read_deployment_by_name(name).id)

    def artifact(self, key: str) -> str:
        """The newest artifact `key`'s data."""
        with self.prefect() as client:
            return str(
                max((a for a in client.read_artifacts() if a.key == key), key=lambda a: a.created).data
            )

    def processes(self) -> list[psutil.Process]:
        """What `ui.sh start` started (from its pid files) and everything below."""
        found = []
        for pidfile in self.state.glob("*.pid"):
            try:
                process = psutil.Process(int(pidfile.read_text()))
                found += [process, *process.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        return found


def ui_sh(stack_env: dict[str, str], action: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "infra/local/ui.sh", action], cwd=ROOT, env=stack_env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip


@contextlib.contextmanager
def started_stack(tmp_path: Path) -> Iterator[Stack]:
    """`ui.sh start` on free ports with a state under `tmp_path`; `ui.sh stop` at the end."""
    prefect_port, mlflow_port = free_port(), free_port()
    env = {
        **os.environ,
        "BIN": str(Path(sys.executable).parent),
        "UI_STATE": str(tmp_path / "ui"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_PORT": str(prefect_port),
        "MLFLOW_PORT": str(mlflow_port),
        "MLFLOW_DB": str(tmp_path / "mlflow.db"),
    }
    started = ui_sh(env, "start")
    stack = Stack(
        f"http://127.0.0.1:{prefect_port}", f"http://127.0.0.1:{mlflow_port}", (prefect_port, mlflow_port),
        tmp_path / "ui", env, started.stdout,
    )  # fmt: skip
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        yield stack
    finally:
        ui_sh(env, "stop")


def pipeline_config(tmp_path: Path, mlflow_db: str) -> PipelineConfig:
    """The shrunk demo pipeline, logging to the UI's MLflow store."""
    return shrunk_demo_config(
        tmp_path, f"tracking.tracking_uri=sqlite:///{mlflow_db}", "registry.model_name=vidtx-ui-test"
    )


def settings(config: PipelineConfig, folder: Path) -> dict:
    """A flow's parameters for `config`: its run form naming the config written to `folder`."""
    return {"settings": {"config": str(config_file(config, folder))}}


def run_deployment(stack: Stack, name: str, parameters: dict) -> str:
    """Run a deployment through the server `ui.sh` started, as the UI's Run button does; the flow run
    id once the run is final (the worker that `ui.sh` started runs it)."""
    from prefect.deployments import run_deployment as run
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: f"{stack.prefect_url}/api"}):
        flow_run = run(name, parameters=parameters, timeout=900)
    assert flow_run.state is not None
    assert flow_run.state.is_completed(), flow_run.state
    return str(flow_run.id)
