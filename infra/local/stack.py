"""The services of infra/docker/compose.yaml as processes on 127.0.0.1, without Docker, with
authentication on: `python -m infra.local.stack start|stop|purge` (make stack / make stack-stop), and
`restart SERVICE` (one of RESTARTABLE, with the same settings: operations and the fault drills).

- PostgreSQL (Debian's binaries, run as the `postgres` user when started as root): one database and
  role each for MLflow and Prefect, in the stack's own folder, on a port of its own.
- SeaweedFS (the tests' S3 server, `infra/local/s3_server.py`: its store and its S3 gateway) with its
  data in `STACK/seaweedfs`; the stack's keys are the only credentials it takes; the buckets `vidtx`
  (data, checkpoints) and `mlflow-artifacts`.
- The MLflow tracking server on PostgreSQL, artifacts proxied to the S3 server (clients need no S3
  credentials for them), MLflow's basic-auth app (admin password generated here).
- The Prefect server on PostgreSQL with its API auth string, a process work pool and a worker.
- A two-node Ray cluster (head with the dashboard and Jobs API, one worker node), token auth.

`start` writes `STACK/stack.env` (mode 600): the addresses and credentials every client reads,
for `source`. `stop` ends exactly what `start` started (the pid files under `STACK/pids`) and keeps
the data (PostgreSQL's folder and SeaweedFS's: runs, models and shards survive a restart); `purge`
removes it too. STACK is
`runs/stack`, or $VIDTX_STACK_DIR. Secrets are generated once into `STACK/secrets.json` (mode 600)
and never printed. Everything listens on 127.0.0.1 only, the Ray nodes included (`infra/local/ray_node.py`).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from infra.local.leftovers import left_running, marked, new_token
from infra.local.ports import free_port
from infra.local.postgres import Postgres
from infra.local.processes import end_tree, end_trees, spawn, wait_for_http, wait_for_ray_nodes
from infra.local.s3_server import SeaweedFS, create_bucket
from vidtx.env import apply_defaults

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PORTS = ("postgres", "s3", "mlflow", "prefect", "ray_gcs", "ray_dashboard")
DEFAULT_PORTS = {
    "postgres": 5433,
    "s3": 9100,
    "mlflow": 5050,
    "prefect": 4250,
    "ray_gcs": 6380,
    "ray_dashboard": 8266,
}
BUCKETS = ("vidtx", "mlflow-artifacts")
WORK_POOL = "vidtx-process"
RESTARTABLE = ("postgres", "s3", "mlflow", "prefect-server", "prefect-worker")


@dataclass
class Service:
    """One process of the stack: how it starts, and the URL that answers once it is up."""

    command: list[str]
    env: dict[str, str]
    health: str | None = None
    headers: dict[str, str] | None = None


class Stack:
    def __init__(self, folder: Path) -> None:
        self.folder = folder.resolve()
        self.pids, self.logs = self.folder / "pids", self.folder / "logs"

    # --- configuration ------------------------------------------------------------------------------

    def settings(self) -> dict:
        """Ports and secrets, made once and kept (a restarted stack finds its databases' passwords)."""
        path = self.folder / "secrets.json"
        kept = json.loads(path.read_text()) if path.exists() else {}
        token = lambda: secrets.token_urlsafe(18)  # noqa: E731
        ports = {
            name: int(os.environ.get(f"STACK_{name.upper()}_PORT", DEFAULT_PORTS[name])) for name in PORTS
        }
        made = {"ports": ports, "postgres": token(), "mlflow_db": token(), "prefect_db": token(),
                "mlflow_admin": token(), "prefect_admin": token(), "ray_token": secrets.token_hex(32),
                "flask_secret": token(), "s3": {"key": f"vidtx-{secrets.token_hex(6)}", "secret": token()},
                "seaweedfs_ports": SeaweedFS(self.folder, 0, {}).ports}  # fmt: skip
        if kept and all(kept.get(name) for name in made):
            return kept
        made |= {
            name: value for name, value in kept.items() if value
        }  # an older stack's: what it lacked added
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write_private(path, json.dumps(made))
        return made

    def client_environment(self, settings: dict) -> dict[str, str]:
        """What a shell, the worker and its flow runs read: addresses and each client's credentials."""
        ports, s3 = settings["ports"], settings["s3"]
        return {
            "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{ports['mlflow']}",
            "MLFLOW_TRACKING_USERNAME": "admin",
            "MLFLOW_TRACKING_PASSWORD": settings["mlflow_admin"],
            # artifacts come through the server too: MLflow 3 otherwise downloads from the bucket by
            # presigned URLs, which a laptop may not reach
            "MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD": "false",
            "PREFECT_API_URL": f"http://127.0.0.1:{ports['prefect']}/api",
            "PREFECT_API_AUTH_STRING": f"admin:{settings['prefect_admin']}",
            "RAY_ADDRESS": f"http://127.0.0.1:{ports['ray_dashboard']}",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": settings["ray_token"],
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{ports['s3']}",
            "AWS_ACCESS_KEY_ID": s3["key"],
            "AWS_SECRET_ACCESS_KEY": s3["secret"],
            "AWS_DEFAULT_REGION": "us-east-1",
            "VIDTX_STACK_BUCKET": "s3://vidtx",
        }

    @staticmethod
    def _write_private(path: Path, text: str) -> None:
        path.touch(mode=0o600)
        path.write_text(text)

    # --- processes ----------------------------------------------------------------------------------

    def _pidfile(self, name: str) -> Path:
        """The pid file of `name`: its number says the start order (`stop` goes backwards)."""
        found = list(self.pids.glob(f"*-{name}.pid"))
        return found[0] if found else self.pids / f"{len(list(self.pids.glob('*.pid'))):02d}-{name}.pid"

    def _start(self, services: dict[str, Service]) -> None:
        """Spawn them all (in order), then wait until each answers: they start side by side."""
        for name, service in services.items():
            spawn(service.command, service.env, self.logs / f"{name}.log", self._pidfile(name))
        for name, service in services.items():
            if service.health:
                wait_for_http(name, self._pidfile(name), service.health, service.headers, timeout=180)

    def _environment(self) -> dict[str, str]:
        """This process's environment, less any service variable, with the venv's tools on PATH."""
        base = dict(os.environ) | {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        base = {k: v for k, v in base.items() if not k.startswith(("MLFLOW_", "PREFECT_API", "AWS_", "RAY_"))}
        return marked(base, self._owner.read_text()) if self._owner.exists() else base

    @property
    def _owner(self) -> Path:
        """The token every process of this start of the stack carries (`infra.local.leftovers`)."""
        return self.pids / "owner"

    def _services(self, settings: dict) -> dict[str, Service]:
        """What runs on PostgreSQL and the S3 server, in start order, from the kept settings."""
        ports, clients, base = settings["ports"], self.client_environment(settings), self._environment()
        endpoint, s3 = clients["AWS_ENDPOINT_URL"], settings["s3"]
        auth_config = self.folder / "mlflow-auth.ini"
        pg = f"127.0.0.1:{ports['postgres']}"
        mlflow = Service([str(BIN / "mlflow"), "server", "--app-name", "basic-auth", "--host", "127.0.0.1",
                          "--port", str(ports["mlflow"]), "--workers", "1",
                          "--backend-store-uri", f"postgresql+psycopg2://mlflow:{settings['mlflow_db']}@{pg}/mlflow",
                          "--artifacts-destination", "s3://mlflow-artifacts"],
                         base | {"MLFLOW_AUTH_CONFIG_PATH": str(auth_config), "MLFLOW_S3_ENDPOINT_URL": endpoint,
                                 "MLFLOW_AUTH_ADMIN_USERNAME": "admin", "MLFLOW_AUTH_ADMIN_PASSWORD": settings["mlflow_admin"],
                                 "AWS_ACCESS_KEY_ID": s3["key"], "AWS_SECRET_ACCESS_KEY": s3["secret"],
                                 "MLFLOW_FLASK_SERVER_SECRET_KEY": settings["flask_secret"],
                                 "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                         f"{clients['MLFLOW_TRACKING_URI']}/health")  # fmt: skip
        prefect = base | {
            "PREFECT_HOME": str(self.folder / "prefect"),
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"postgresql+asyncpg://prefect:{settings['prefect_db']}@{pg}/prefect",
            "PREFECT_SERVER_API_AUTH_STRING": f"admin:{settings['prefect_admin']}",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        }
        basic = {
            "Authorization": "Basic " + base64.b64encode(clients["PREFECT_API_AUTH_STRING"].encode()).decode()
        }
        prefect_server = Service([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                                  "--port", str(ports["prefect"])], prefect,
                                 f"{clients['PREFECT_API_URL']}/health", basic)  # fmt: skip
        # the nodes' own environment holds the clients' credentials: Ray workers log to MLflow and read
        # the bucket with them (vidtx never puts credentials into a runtime env, which Ray displays)
        # and RAY_ADDRESS is their own GCS: what Ray's processes look up without an address (Ray Train's
        # placement-group cleaner) would otherwise stop at every other Ray running on this machine
        ray = base | clients | {"RAY_ADDRESS": f"127.0.0.1:{ports['ray_gcs']}", "PYTHONPATH": str(ROOT)}
        ray_head = Service(self._ray_start(ports, "--head", f"--port={ports['ray_gcs']}",
                                           "--dashboard-host=127.0.0.1", f"--dashboard-port={ports['ray_dashboard']}",
                                           f"--ray-client-server-port={free_port()}",
                                           f"--temp-dir={self.folder / 'ray'}"), ray,
                           f"{clients['RAY_ADDRESS']}/api/version",
                           {"Authorization": f"Bearer {settings['ray_token']}"})  # fmt: skip
        ray_worker = Service(self._ray_start(ports, f"--address=127.0.0.1:{ports['ray_gcs']}"), ray)
        worker = Service(
            [str(BIN / "prefect"), "worker", "start", "--pool", WORK_POOL], base | prefect | clients
        )
        seaweedfs = self._seaweedfs(settings)
        store, gateway = seaweedfs.commands().values()
        return {"s3-store": Service(store, base, f"http://127.0.0.1:{seaweedfs.ports['master']}/cluster/healthz"),
                "s3": Service(gateway, base, seaweedfs.health), "mlflow": mlflow, "prefect-server": prefect_server,
                "ray-head": ray_head, "ray-worker": ray_worker, "prefect-worker": worker}  # fmt: skip

    def start(self) -> dict[str, str]:
        if any(self.pids.glob("*.pid")):
            raise SystemExit(f"the stack in {self.folder} is running (make stack-stop first)")
        for folder in (self.pids, self.logs, self.folder / "prefect"):
            folder.mkdir(parents=True, exist_ok=True)
        self._owner.write_text(new_token("make stack"))
        settings = self.settings()
        ports = settings["ports"]
        self._postgres(settings).start(self.logs)
        self._postgres(settings).create_databases(
            {name: settings[f"{name}_db"] for name in ("mlflow", "prefect")}
        )

        services = self._services(settings)
        self._start({name: services[name] for name in ("s3-store", "s3")})
        os.environ |= {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": settings["s3"]["key"],
                       "AWS_SECRET_ACCESS_KEY": settings["s3"]["secret"]}  # fmt: skip
        for bucket in BUCKETS:  # kept from an earlier start, or made
            create_bucket(f"http://127.0.0.1:{ports['s3']}", bucket)
        clients = self.client_environment(settings)
        # MLflow checks the password's scrypt hash on each request (0.1 s of CPU here) unless it caches
        # a checked credential: a model's upload and check, ~200 requests, took 30 s of the stack's
        # registration. Cached for 60 s, a password changed through the API is refused at once by
        # the worker that took the change, and by the others within the minute.
        self._write_private(self.folder / "mlflow-auth.ini", "\n".join([
            "[mlflow]", "default_permission = READ", f"database_uri = sqlite:///{self.folder / 'mlflow-auth.db'}",
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth",
            "auth_cache_ttl_seconds = 60", "",
        ]))  # fmt: skip
        self._start({name: services[name] for name in ("mlflow", "prefect-server", "ray-head")})
        # the work pool is made while the second Ray node joins (each takes seconds)
        work_pool = subprocess.Popen([str(BIN / "prefect"), "work-pool", "create", WORK_POOL, "--type", "process",
                                      "--overwrite"], env=services["prefect-worker"].env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)  # fmt: skip
        self._start({"ray-worker": services["ray-worker"]})  # joins the head's GCS, up now
        os.environ |= {
            name: clients[name] for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
        }  # before Ray reads them
        wait_for_ray_nodes(clients["RAY_ADDRESS"], 2, f"{self.logs}/ray-*.log")
        if work_pool.wait() != 0:
            raise SystemExit(f"prefect work-pool create {WORK_POOL} failed: {work_pool.stderr.read()}")
        self._start({"prefect-worker": services["prefect-worker"]})
        self._write_private(
            self.folder / "stack.env", "".join(f"export {k}={v}\n" for k, v in clients.items())
        )
        return clients

    def restart(self, name: str) -> None:
        """Stop one service and start it again with the same settings (the fault drills; operations).
        The worker's runs in flight are marked Crashed first (as `make ui` does), so a retry takes them."""
        if name not in RESTARTABLE:
            raise SystemExit(f"restart takes one of {', '.join(RESTARTABLE)}, not {name!r}")
        settings = self.settings()
        if name == "postgres":
            self._postgres(settings).stop()
            self._postgres(settings).start(self.logs)
            return
        services = self._services(settings)
        pidfile = self._pidfile(name)
        if pidfile.exists():
            end_tree(int(pidfile.read_text()))
        if name == "prefect-worker":
            orphans = [str(BIN / "python"), str(ROOT / "infra/local/flow_runs.py"), "crash-orphans",
                       "--work-pool", WORK_POOL]  # fmt: skip
            subprocess.run(orphans, env=services[name].env, check=True, capture_output=True)
        self._start({name: services[name]})

    def _seaweedfs(self, settings: dict) -> SeaweedFS:
        s3 = settings["s3"]
        return SeaweedFS(self.folder / "seaweedfs", settings["ports"]["s3"], {s3["key"]: s3["secret"]},
                         settings["seaweedfs_ports"])  # fmt: skip

    def _postgres(self, settings: dict) -> Postgres:
        return Postgres(self.folder, settings["ports"]["postgres"], settings["postgres"])

    @staticmethod
    def _ray_start(ports: dict[str, int], *args: str) -> list[str]:
        local_ports = ("--node-manager-port", "--object-manager-port", "--metrics-export-port",
                       "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port")  # fmt: skip
        return [str(BIN / "python"), "-m", "infra.local.ray_node", "start", "--block", "--disable-usage-stats",
                "--node-ip-address=127.0.0.1",
                "--num-cpus=1", *(f"{option}={free_port()}" for option in local_ports), *args]  # fmt: skip

    def stop(self) -> list[str]:
        """End what `start` started: the Ray nodes killed, then, last started first, SIGTERM to each
        process tree and SIGKILL to what is left of them after one wait."""
        pidfiles = sorted(self.pids.glob("*.pid"), reverse=True)
        roots = {pidfile.name: int(pidfile.read_text()) for pidfile in pidfiles}
        # Ray's node processes, signalled together, wait on one another for 20 s before exiting, and
        # a node keeps nothing to flush (as `ray stop --force`)
        end_trees([pid for name, pid in roots.items() if "-ray-" in name], kill=True)
        end_trees(list(roots.values()))
        stopped = []
        for pidfile in pidfiles:
            pidfile.unlink()
            stopped.append(pidfile.stem.split("-", 1)[1])
        if Postgres(self.folder).stop():
            stopped.append("postgres")
        return stopped

    def left_running(self) -> list[str]:
        """What this start of the stack left running once stopped, a line each (then killed)."""
        if not self._owner.exists():
            return []
        lines = left_running(self._owner.read_text())
        self._owner.unlink()
        return lines


def main() -> None:
    apply_defaults()
    stack = Stack(Path(os.environ.get("VIDTX_STACK_DIR", ROOT / "runs" / "stack")))
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "start":
        clients = stack.start()
        print(f"stack up: MLflow {clients['MLFLOW_TRACKING_URI']}, Prefect {clients['PREFECT_API_URL']}, "
              f"Ray {clients['RAY_ADDRESS']}, S3 {clients['AWS_ENDPOINT_URL']}; "
              f"clients: source {stack.folder / 'stack.env'}")  # fmt: skip
    elif command == "restart" and len(sys.argv) == 3:
        stack.restart(sys.argv[2])
        print(f"restarted {sys.argv[2]}")
    elif command in ("stop", "purge"):
        print(f"stopped: {', '.join(stack.stop()) or 'nothing was running'}")
        if left := stack.left_running():
            raise SystemExit(
                "\n".join(f"error: make stack-stop left a process running: {line}" for line in left)
            )
        if command == "purge":  # the data too: PostgreSQL's folder and the stack's
            shutil.rmtree(Postgres(stack.folder).home, ignore_errors=True)
            shutil.rmtree(stack.folder, ignore_errors=True)
            print(f"removed {stack.folder}")
    else:
        raise SystemExit(
            f"usage: python -m infra.local.stack start|stop|purge|restart {{{'|'.join(RESTARTABLE)}}}"
        )


if __name__ == "__main__":
    main()
