"""A real multi-node Ray cluster on this machine, for the tests (`tests/test_cluster.py`,
`tests/test_shard_ray.py`) and the benchmarks (`benchmarks/shard_ray.py`): one `ray start --block`
process per node.

Every node is its own `ray start` (the head with the dashboard and the Jobs API, the others joining it
with `--address`; through `infra/local/ray_node.py`, so that every server of it listens on 127.0.0.1
only), with ports of its own, a custom resource naming it
and, for the head, a temp dir of its own. `--block` keeps each node's processes (raylet, agents, Ray
workers) in the process tree of the `ray start` the fixture started, so a node is stopped (or killed,
to simulate losing it) by signalling exactly that tree: never a global `ray stop`, which would also
stop other sessions' Ray.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from ray.util.state import list_nodes

from infra.local.ports import free_port

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent  # the nodes' jobs and workers import this checkout's vidtx


@dataclass
class RayNode:
    """One node: the `ray start --block` process whose tree holds all of the node's processes."""

    name: str
    process: subprocess.Popen
    log: Path

    def tree(self) -> list[psutil.Process]:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        return []

    def kill_raylet(self) -> int:
        """SIGKILL the node's raylet (what a lost machine looks like to the rest); returns its pid."""
        (raylet,) = [p for p in self.tree() if p.name() == "raylet"]
        raylet.kill()
        return raylet.pid

    def stop(self) -> None:
        processes = self.tree()
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(processes, timeout=30)


@dataclass
class LocalCluster:
    """A head node (dashboard and Jobs API) and worker nodes joining it, all on this machine."""

    num_cpus: int
    temp_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    gcs_port: int = field(default_factory=free_port)
    dashboard_port: int = field(default_factory=free_port)
    nodes: list[RayNode] = field(default_factory=list)

    @property
    def dashboard(self) -> str:
        """The Jobs API and state API address (what `RAY_ADDRESS` names for a submission)."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(self, name: str, *args: str) -> RayNode:
        ports = {
            "--node-manager-port": free_port(),
            "--object-manager-port": free_port(),
            "--metrics-export-port": free_port(),
            "--dashboard-agent-listen-port": free_port(),
            "--dashboard-agent-grpc-port": free_port(),
            "--runtime-env-agent-port": free_port(),
        }
        log = Path(self.temp_dir, f"{name}.log")
        command = [
            str(BIN / "python"), "-m", "infra.local.ray_node", "start", "--block", "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.num_cpus}", f"--resources={json.dumps({name: 1})}",
            *(f"{option}={port}" for option, port in ports.items()), *args,
        ]  # fmt: skip
        env = os.environ | {
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "RAY_AUTH_MODE": "disabled",
            # A node whose processes are gone is declared dead after 3 failed health checks 1 s apart
            # (Ray's defaults: 5, 3 s apart, so about 15 s of waiting in every node-loss test); a node
            # that is alive but busy still has each check's 10-s timeout.
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_failure_threshold": "3",
        }
        env.pop("RAY_ADDRESS", None)
        with log.open("wb") as out:
            process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        node = RayNode(name, process, log)
        self.nodes.append(node)
        return node

    def start_head(self) -> RayNode:
        return self._start(
            "head",
            "--head",
            f"--port={self.gcs_port}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--ray-client-server-port={free_port()}",
            f"--temp-dir={self.temp_dir}",  # short: Ray's socket paths must fit 107 bytes
        )

    def add_node(self, name: str) -> RayNode:
        return self._start(name, f"--address=127.0.0.1:{self.gcs_port}")

    def alive_nodes(self) -> dict[str, str]:
        """Node id -> the custom resource naming it, for every node the cluster counts as alive."""
        return {
            node.node_id: next((name for name in node.resources_total if self._named(name)), "?")
            for node in list_nodes(address=self.dashboard, detail=True)
            if node.state == "ALIVE"
        }

    def _named(self, resource: str) -> bool:
        return any(resource == node.name for node in self.nodes)

    def wait_for(self, names: set[str], timeout: float = 180.0) -> dict[str, str]:
        """Wait until exactly the nodes `names` are alive; returns `alive_nodes()`."""
        deadline = time.monotonic() + timeout
        alive: dict[str, str] | Exception = {}
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.process.poll() is not None and node.name in names:
                    raise RuntimeError(f"ray node {node.name} exited: {node.log.read_text()[-3000:]}")
            try:
                alive = self.alive_nodes()
            except Exception as err:  # the dashboard is not up yet
                alive = err
            if isinstance(alive, dict) and set(alive.values()) == names:
                return alive
            time.sleep(1.0)
        raise TimeoutError(f"ray nodes {sorted(names)} not alive after {timeout:.0f} s: {alive}")

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@contextlib.contextmanager
def head_and_node_b(num_cpus: int) -> Iterator[LocalCluster]:
    """A head node and a second node `node_b`, `num_cpus` logical CPUs each; afterwards no process of
    theirs is left."""
    nodes = LocalCluster(num_cpus=num_cpus)
    try:
        nodes.start_head()
        nodes.add_node("node_b")
        nodes.wait_for({"head", "node_b"})
        yield nodes
    finally:
        nodes.stop()
    leftovers = [p for node in nodes.nodes for p in node.tree()]
    assert not leftovers, leftovers
