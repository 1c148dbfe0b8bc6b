"""The services of infra/docker/compose.yaml as processes on 127.0.0.1, without Docker, with
authentication on: `python -m infra.local.stack start|stop|purge` (make stack / make stack-stop).

- PostgreSQL (Debian's binaries, run as the `postgres` user when started as root): one database and
  role each for MLflow and Prefect, in the stack's own folder, on a port of its own.
- An S3 server (moto's server mode, the tests' one) that checks signatures: its IAM user's keys are
  the only credentials it takes; the bucket `vidtx` (data, checkpoints) and `mlflow-artifacts`.
- The MLflow tracking server on PostgreSQL, artifacts proxied to the S3 server (clients need no S3
  credentials for them), MLflow's basic-auth app (admin password generated here).
- The Prefect server on PostgreSQL with its API auth string, a process work pool and a worker.
- A two-node Ray cluster (head with the dashboard and Jobs API, one worker node), token auth.

`start` writes `STACK/stack.env` (mode 600): the addresses and credentials every client reads,
for `source`. `stop` ends exactly what `start` started (the pid files under `STACK/pids`) and keeps
the data (PostgreSQL's folder; moto keeps objects in memory only); `purge` removes it too. STACK is
`runs/stack`, or $VIDTX_STACK_DIR. Secrets are generated once into `STACK/secrets.json` (mode 600)
and never printed. The Ray nodes listen on the machine's address (Ray binds a multi-node cluster's
servers there), guarded by the token; everything else listens on 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from infra.local.postgres import Postgres
from infra.local.s3_server import create_user, free_port

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


class Stack:
    def __init__(self, folder: Path) -> None:
        self.folder = folder.resolve()
        self.pids, self.logs = self.folder / "pids", self.folder / "logs"

    # --- configuration ------------------------------------------------------------------------------

    def settings(self) -> dict:
        """Ports and secrets, made once and kept (a restarted stack finds its databases' passwords)."""
        path = self.folder / "secrets.json"
        if path.exists():
            return json.loads(path.read_text())
        token = lambda: secrets.token_urlsafe(18)  # noqa: E731
        ports = {
            name: int(os.environ.get(f"STACK_{name.upper()}_PORT", DEFAULT_PORTS[name])) for name in PORTS
        }
        made = {"ports": ports, "postgres": token(), "mlflow_db": token(), "prefect_db": token(),
                "mlflow_admin": token(), "prefect_admin": token(), "ray_token": secrets.token_hex(32),
                "flask_secret": token(), "s3": None}  # fmt: skip
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

    def _spawn(self, name: str, command: list[str], env: dict[str, str]) -> None:
        """Start `name` in a session of its own; its pid file's number says the start order."""
        with (self.logs / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        (self.pids / f"{len(list(self.pids.glob('*.pid'))):02d}-{name}.pid").write_text(str(process.pid))

    def _wait(self, name: str, url: str, headers: dict[str, str] | None = None, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        (pidfile,) = self.pids.glob(f"*-{name}.pid")
        while time.monotonic() < deadline:
            if not _running(int(pidfile.read_text())):
                raise RuntimeError(f"{name} exited (see {self.logs / name}.log)")
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=3):
                    return
            except OSError:
                time.sleep(1)
        raise RuntimeError(f"{name} did not answer {url} in {timeout:.0f} s (see {self.logs / name}.log)")

    def start(self) -> dict[str, str]:
        if any(self.pids.glob("*.pid")):
            raise SystemExit(f"the stack in {self.folder} is running (make stack-stop first)")
        for folder in (self.pids, self.logs, self.folder / "prefect"):
            folder.mkdir(parents=True, exist_ok=True)
        settings = self.settings()
        ports = settings["ports"]
        base = dict(os.environ) | {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        for name in list(base):
            if name.startswith(("MLFLOW_", "PREFECT_API", "AWS_", "RAY_")):
                base.pop(name)
        postgres = Postgres(self.folder, settings["ports"]["postgres"], settings["postgres"])
        postgres.start(self.logs)
        postgres.create_databases({name: settings[f"{name}_db"] for name in ("mlflow", "prefect")})

        # S3: three unsigned requests make the IAM user, then every request must be signed with its keys
        self._spawn("s3", [str(BIN / "python"), "-m", "moto.server", "-H", "127.0.0.1", "-p", str(ports["s3"])],
                    base | {"INITIAL_NO_AUTH_ACTION_COUNT": "3"})  # fmt: skip
        endpoint = f"http://127.0.0.1:{ports['s3']}"
        self._wait("s3", f"{endpoint}/moto-api/")
        # boto3 signs the bootstrap requests with whatever keys it finds; moto does not check those three
        os.environ |= {
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "bootstrap",
            "AWS_SECRET_ACCESS_KEY": "bootstrap",
        }
        key, secret = create_user(endpoint, "vidtx")
        settings["s3"] = {"key": key, "secret": secret}  # moto forgets its users: new keys each start
        self._write_private(self.folder / "secrets.json", json.dumps(settings))
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
                          region_name="us-east-1")  # fmt: skip
        for bucket in BUCKETS:
            s3.create_bucket(Bucket=bucket)
        clients = self.client_environment(settings)

        auth_config = self.folder / "mlflow-auth.ini"
        self._write_private(auth_config, "\n".join([
            "[mlflow]", "default_permission = READ", f"database_uri = sqlite:///{self.folder / 'mlflow-auth.db'}",
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth", "",
        ]))  # fmt: skip
        pg = f"127.0.0.1:{ports['postgres']}"
        self._spawn("mlflow", [str(BIN / "mlflow"), "server", "--app-name", "basic-auth", "--host", "127.0.0.1",
                               "--port", str(ports["mlflow"]), "--workers", "1",
                               "--backend-store-uri", f"postgresql+psycopg2://mlflow:{settings['mlflow_db']}@{pg}/mlflow",
                               "--artifacts-destination", "s3://mlflow-artifacts"],
                    base | {"MLFLOW_AUTH_CONFIG_PATH": str(auth_config), "MLFLOW_S3_ENDPOINT_URL": endpoint,
                            "MLFLOW_AUTH_ADMIN_USERNAME": "admin", "MLFLOW_AUTH_ADMIN_PASSWORD": settings["mlflow_admin"],
                            "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
                            "MLFLOW_FLASK_SERVER_SECRET_KEY": settings["flask_secret"],
                            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})  # fmt: skip
        prefect = base | {
            "PREFECT_HOME": str(self.folder / "prefect"),
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"postgresql+asyncpg://prefect:{settings['prefect_db']}@{pg}/prefect",
            "PREFECT_SERVER_API_AUTH_STRING": f"admin:{settings['prefect_admin']}",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        }
        self._spawn("prefect-server", [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                                       "--port", str(ports["prefect"])], prefect)  # fmt: skip
        # the nodes' own environment holds the clients' credentials: Ray workers log to MLflow and read
        # the bucket with them (vidtx never puts credentials into a runtime env, which Ray displays)
        ray = base | {k: v for k, v in clients.items() if k != "RAY_ADDRESS"} | {"PYTHONPATH": str(ROOT)}
        self._spawn("ray-head", self._ray_start(ports, "--head", f"--port={ports['ray_gcs']}",
                                                "--dashboard-host=127.0.0.1", f"--dashboard-port={ports['ray_dashboard']}",
                                                f"--ray-client-server-port={free_port()}",
                                                f"--temp-dir={self.folder / 'ray'}"), ray)  # fmt: skip
        self._wait("mlflow", f"{clients['MLFLOW_TRACKING_URI']}/health")
        basic = {
            "Authorization": "Basic "
            + base64.b64encode(f"admin:{settings['prefect_admin']}".encode()).decode()
        }
        self._wait("prefect-server", f"{clients['PREFECT_API_URL']}/health", basic)
        bearer = {"Authorization": f"Bearer {settings['ray_token']}"}
        self._wait("ray-head", f"{clients['RAY_ADDRESS']}/api/version", bearer)
        self._spawn("ray-worker", self._ray_start(ports, f"--address=127.0.0.1:{ports['ray_gcs']}"), ray)
        self._wait_for_ray_nodes(clients, 2)
        worker = base | prefect | clients
        subprocess.run([str(BIN / "prefect"), "work-pool", "create", WORK_POOL, "--type", "process", "--overwrite"],
                       env=worker, check=True, capture_output=True)  # fmt: skip
        self._spawn("prefect-worker", [str(BIN / "prefect"), "worker", "start", "--pool", WORK_POOL], worker)
        self._write_private(
            self.folder / "stack.env", "".join(f"export {k}={v}\n" for k, v in clients.items())
        )
        return clients

    def _wait_for_ray_nodes(self, clients: dict[str, str], count: int, timeout: float = 180) -> None:
        os.environ |= {
            name: clients[name] for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
        }  # before Ray reads them
        from ray.util.state import list_nodes

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # the state API is not up yet
                if sum(n.state == "ALIVE" for n in list_nodes(address=clients["RAY_ADDRESS"])) == count:
                    return
            time.sleep(1)
        raise RuntimeError(
            f"the Ray cluster has not {count} nodes after {timeout:.0f} s (see {self.logs}/ray-*.log)"
        )

    @staticmethod
    def _ray_start(ports: dict[str, int], *args: str) -> list[str]:
        local_ports = ("--node-manager-port", "--object-manager-port", "--metrics-export-port",
                       "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port")  # fmt: skip
        return [str(BIN / "ray"), "start", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                "--num-cpus=1", *(f"{option}={free_port()}" for option in local_ports), *args]  # fmt: skip

    def stop(self) -> list[str]:
        """End what `start` started, last started first: SIGTERM to each process tree, then SIGKILL."""
        stopped = []
        for pidfile in sorted(self.pids.glob("*.pid"), reverse=True):
            pid = int(pidfile.read_text())
            try:
                tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                tree = []
            for process in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.send_signal(signal.SIGTERM)
            _, alive = psutil.wait_procs(tree, timeout=20)
            for process in alive:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            psutil.wait_procs(alive, timeout=10)
            pidfile.unlink()
            stopped.append(pidfile.stem.split("-", 1)[1])
        if Postgres(self.folder).stop():
            stopped.append("postgres")
        return stopped


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def main() -> None:
    stack = Stack(Path(os.environ.get("VIDTX_STACK_DIR", ROOT / "runs" / "stack")))
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "start":
        clients = stack.start()
        print(f"stack up: MLflow {clients['MLFLOW_TRACKING_URI']}, Prefect {clients['PREFECT_API_URL']}, "
              f"Ray {clients['RAY_ADDRESS']}, S3 {clients['AWS_ENDPOINT_URL']}; "
              f"clients: source {stack.folder / 'stack.env'}")  # fmt: skip
    elif command in ("stop", "purge"):
        print(f"stopped: {', '.join(stack.stop()) or 'nothing was running'}")
        if command == "purge":  # the data too: PostgreSQL's folder and the stack's
            shutil.rmtree(Postgres(stack.folder).home, ignore_errors=True)
            shutil.rmtree(stack.folder, ignore_errors=True)
            print(f"removed {stack.folder}")
    else:
        raise SystemExit("usage: python -m infra.local.stack start|stop|purge")


if __name__ == "__main__":
    main()
