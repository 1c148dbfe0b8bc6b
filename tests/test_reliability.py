"""Cross-cutting reliability checks: fail before compute, no secrets leak, safe defaults."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from mlflow import MlflowClient
from sockets import exposed, listening_sockets, process_tree

from vidtx.config import ConfigError, DataConfig, PipelineConfig, load_config
from vidtx.data.eval_loader import build_eval_loader
from vidtx.env import DEFAULTS
from vidtx.manifest import Manifest, ShardInfo
from vidtx.stages.evaluate import evaluate_trained
from vidtx.stages.train import train
from vidtx.stages.trained_model import TrainedRun
from vidtx.tracking.runs import TrackingUnavailableError, connect, start_or_resume_run

ROOT = Path(__file__).resolve().parent.parent


def test_unreachable_mlflow_fails_before_any_compute(
    tiny_dataset: PipelineConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    config = tiny_dataset.model_copy(deep=True)
    config.train.storage_path = str(tmp_path / "ray")
    with pytest.raises(TrackingUnavailableError, match="unavailable"):
        train(config, run_name="no-mlflow")
    assert not (tmp_path / "ray").exists()  # no Ray run was started


@pytest.mark.slow
def test_more_workers_than_cpus_is_a_clear_error(tiny_dataset: PipelineConfig, tmp_path: Path) -> None:
    config = tiny_dataset.model_copy(deep=True)
    config.workdir, config.train.storage_path = tmp_path, str(tmp_path / "ray")
    config.train.num_workers = 64
    with pytest.raises(ValueError, match=r"train.num_workers x train.cpus_per_worker = 64 CPUs"):
        train(config, run_name="too-big")
    assert not (tmp_path / "ray" / "too-big").exists()
    config.train.num_workers, config.train.use_gpu = 1, True
    with pytest.raises(
        ValueError, match=r"train.num_workers with train.use_gpu = 1 GPUs, but the Ray cluster has 0 GPUs"
    ):
        train(config, run_name="no-gpu")


def test_no_secret_from_the_environment_reaches_mlflow_params(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY",
        "MLFLOW_TRACKING_PASSWORD": "hunter2-correct-horse",
        "PREFECT_API_KEY": "pnu_0123456789abcdefghijklmnopqrstuvwxyz",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    client = connect(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = start_or_resume_run(client, PipelineConfig(workdir=tmp_path), "secrets")
    logged = MlflowClient(client.tracking_uri).get_run(run_id).data
    values = " ".join([*logged.params.values(), *logged.tags.values()])
    secret_looking = [
        value
        for name, value in os.environ.items()
        if re.search(r"SECRET|PASSWORD|TOKEN|API_KEY|CREDENTIAL", name) and len(value) >= 8
    ]
    assert set(secrets.values()) <= set(secret_looking)
    for value in secret_looking:
        assert value not in values


def test_yaml_configs_are_read_safely_and_servers_bind_localhost() -> None:
    python_sources = [*ROOT.joinpath("vidtx").rglob("*.py"), *ROOT.joinpath("flows").rglob("*.py")]
    for path in python_sources:
        text = path.read_text()
        assert "yaml.load(" not in text, f"{path}: use yaml.safe_load"
        assert "weights_only=False" not in text, f"{path}: load weights with weights_only=True"
    ui = (ROOT / "infra/local/ui.sh").read_text()
    assert "--host 127.0.0.1" in ui
    assert "0.0.0.0" not in ui


def test_the_environment_defaults_name_settings_that_ray_train_and_prefect_read() -> None:
    """vidtx.env's start-up savings (Ray Train's controller on a local instance, the Prefect worker's
    polling) would vanish without a word if an upgrade renamed the settings: it fails here instead."""
    from prefect.settings import get_current_settings
    from ray.train.v2._internal import constants

    ray_train = {constants.HEALTH_CHECK_INTERVAL_S_ENV_VAR, constants.ENABLE_PREEMPTION_WATCHER_ENV_VAR}
    assert ray_train <= set(DEFAULTS)
    assert get_current_settings().worker.query_seconds == float(DEFAULTS["PREFECT_WORKER_QUERY_SECONDS"])


LOCAL_RAY_SESSION = """
import sys, ray
from vidtx.ray_session import ray_session
with ray_session(num_cpus=1):
    ray.get(ray.remote(lambda: None).remote())  # a worker process is up, with its server
    print("started", flush=True)
    sys.stdin.readline()
"""


@pytest.mark.slow
def test_local_ray_is_on_loopback_only_outside_the_driver_s_group(tmp_path: Path) -> None:
    """The local Ray that training and evaluation start, from a process that leads a process group
    (as Prefect's flow runs do):
    - none of its servers is reachable from the network (was: GCS, raylet, workers and the dashboard
      agent listened on 0.0.0.0 and ::);
    - none of its processes is in the driver's group, which Prefect's cancel sends SIGTERM to (was:
      the raylet died with the driver and the driver's core worker ended it with exit code 1 before
      it could stop its training);
    - and its GCS and raylet die with the driver all the same when it is SIGKILLed (the agents and
      workers follow once they miss them, within a minute)."""
    environment = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    session = subprocess.Popen(
        [sys.executable, "-c", LOCAL_RAY_SESSION],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environment, cwd=tmp_path,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert session.stdout is not None
        assert session.stdout.readline() == "started\n"
        listening = listening_sockets(process_tree(session.pid))
        ray_processes = psutil.Process(session.pid).children(recursive=True)
        in_the_driver_s_group = [p.name() for p in ray_processes if os.getpgid(p.pid) == session.pid]
    finally:
        session.kill()
        session.wait(timeout=60)
    servers = {name for names in listening.values() for name in names}
    assert {"gcs_server", "raylet"} <= servers, listening
    assert not exposed(listening), f"listening beyond loopback: {exposed(listening)}"
    assert {"gcs_server", "raylet"} <= {p.name() for p in ray_processes}
    assert not in_the_driver_s_group, in_the_driver_s_group
    gcs_and_raylet = [p for p in ray_processes if p.name() in ("gcs_server", "raylet")]
    _, alive = psutil.wait_procs(gcs_and_raylet, timeout=10)
    for process in ray_processes:  # the rest, not to wait here for them to notice
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    assert not alive, [p.name() for p in alive]


ORPHAN = "import os, time\nif os.fork() == 0:\n    print(os.getpid(), flush=True)\n    time.sleep(120)\n"


def test_what_a_command_leaves_running_is_named_and_ended_orphans_included() -> None:
    """`infra.local.leftovers run`: the check behind the test session's end, `make demo`,
    `make ui-stop` and `make stack-stop`. A command whose child outlives it, reparented to init
    (as the Ray worker found 37 minutes after a green `make test`), fails with a line naming it;
    the orphan is killed. A command that leaves nothing passes with its own exit code."""
    run = [sys.executable, "-m", "infra.local.leftovers", "run", "the orphan test", "--"]
    left = subprocess.run(
        [*run, sys.executable, "-c", ORPHAN], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    orphan = int(left.stdout)
    assert left.returncode == 1
    (line,) = left.stderr.splitlines()
    assert line.startswith(f"error: the orphan test left a process running: pid {orphan} python")
    assert f"in {ROOT}, parent " in line  # its parent gone: init's, or the nearest subreaper's
    assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE
    clean = subprocess.run(
        [*run, sys.executable, "-c", "raise SystemExit(3)"], capture_output=True, text=True, cwd=ROOT
    )
    assert (clean.returncode, clean.stderr) == (3, "")


ACTOR_STUCK_IN_ITS_EXIT = """
import os, threading, time, ray
from vidtx.log import setup_logging
from vidtx.ray_session import ray_session
setup_logging(verbose=True)

@ray.remote(num_cpus=0)
class StuckInItsExit:
    def start(self):
        threading.Thread(target=threading.Event().wait).start()  # never ends: the exit waits for it
        return os.getpid()

with ray_session(num_cpus=1, include_dashboard=False):
    actor = StuckInItsExit.remote()
    print(ray.get(actor.start.remote()), flush=True)
    del actor  # Ray asks it to exit and never forces it
    time.sleep(2)
"""


@pytest.mark.slow
def test_no_worker_outlives_the_local_ray_that_vidtx_started(tmp_path: Path) -> None:
    """A worker of a local Ray whose exit waits on a thread (as a `ray::TrainController` after its
    training did) was left for ever, reparented to init, once the session ended: it is ended with
    its Ray, and named."""
    environment = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    session = subprocess.run(
        [sys.executable, "-c", ACTOR_STUCK_IN_ITS_EXIT], capture_output=True, text=True, env=environment,
        cwd=tmp_path, timeout=180,
    )  # fmt: skip
    assert session.returncode == 0, session.stderr[-3000:]
    stuck = int(session.stdout.split()[0])
    assert not psutil.pid_exists(stuck) or psutil.Process(stuck).status() == psutil.STATUS_ZOMBIE
    assert (
        f"ray::StuckInItsExit (pid {stuck}) outlived its local Ray: killed" in session.stderr + session.stdout
    )


OPEN_SOCKETS = """
import socket, sys
tcp = socket.create_server(("0.0.0.0", 0))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("0.0.0.0", 0))
private = socket.create_server(("127.0.0.1", 0))
print(tcp.getsockname()[1], udp.getsockname()[1], private.getsockname()[1], flush=True)
sys.stdin.readline()
"""


def test_the_socket_check_finds_sockets_open_to_the_network() -> None:
    """The check the loopback tests rely on: a child of the tree listening on 0.0.0.0 (TCP, UDP)."""
    parent = subprocess.Popen(
        ["bash", "-c", f"{sys.executable} -c '{OPEN_SOCKETS}'"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        tcp, udp, private = parent.stdout.readline().split()
        listening = listening_sockets(process_tree(parent.pid))
    finally:
        parent.communicate("\n", timeout=10)
    assert f"tcp 127.0.0.1:{private}" in listening
    assert sorted(exposed(listening)) == [f"tcp 0.0.0.0:{tcp}", f"udp 0.0.0.0:{udp}"]


@pytest.mark.slow
def test_the_test_sessions_ray_listens_on_loopback_only(ray_instance: None) -> None:
    """The session's Ray: what this process started from Ray's package (GCS, raylet, its Python
    services) and everything below them (other tests' children are not Ray's)."""
    rays = [
        child
        for child in psutil.Process().children()
        if any("/ray/" in part for part in child.cmdline())  # .../site-packages/ray/core/src/ray/raylet
    ]
    listening = listening_sockets({pid for child in rays for pid in process_tree(child.pid)})
    assert {"gcs_server", "raylet"} <= {name for names in listening.values() for name in names}, listening
    assert not exposed(listening), f"listening beyond loopback: {exposed(listening)}"


def test_tar_members_with_absolute_or_parent_paths_are_never_written_to_disk(
    tmp_path: Path, write_mp4: Callable[..., Path]
) -> None:
    """A hostile shard: member names that would escape the folder if anything extracted them."""
    video = write_mp4(tmp_path / "clip.mp4", num_frames=8, width=32, height=32).read_bytes()
    meta = json.dumps({"label": 0, "key": "x", "width": 32, "height": 32}).encode()
    shards = tmp_path / "shards"
    shards.mkdir()
    escape = tmp_path / "escaped"
    members = {
        f"../escaped/{uuid.uuid4().hex}.mp4": video,
        f"{tmp_path}/escaped/abs.json": meta,
        "../escaped/evil.json": meta,
        "../escaped/evil.mp4": video,
    }
    with tarfile.open(shards / "val-000000.tar", "w") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    tar_path = shards / "val-000000.tar"
    info = ShardInfo(name=tar_path.name, samples=1, bytes=tar_path.stat().st_size, sha256="0" * 64)
    Manifest(
        split="val", shards=[info], num_samples=1, class_names=["a"], counts_per_class={"a": 1},
        rejects=[], config={}, content_hash="0",
    ).save(shards)  # fmt: skip
    data = DataConfig(shards=shards, num_frames=4, short_side=32, crop_size=32, num_workers=0)
    batches = list(build_eval_loader(data, "val", batch_size=2))
    assert sum(len(labels) for _, labels, _ in batches) >= 1  # read, in memory
    assert not escape.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4", "shards"]


def test_missing_training_and_evaluation_splits_fail_before_any_compute(
    synthetic_shards: tuple[Path, Path], tmp_path: Path
) -> None:
    _, shards = synthetic_shards
    overrides = [f"data.shards={shards}", f"workdir={tmp_path}", f"train.storage_path={tmp_path}/ray"]
    config = load_config(None, [*overrides, "data.train_split=training"])
    started = time.monotonic()
    with pytest.raises(
        FileNotFoundError, match=r"data.train_split 'training': .*\(splits there: train, val\)"
    ):
        train(config, run_name="no-train-split")
    assert time.monotonic() - started < 10  # before Ray starts
    assert sorted(tmp_path.iterdir()) == []  # no tracking store, no checkpoint folder
    config = load_config(None, [*overrides, "eval.split=test"])
    absent = TrainedRun(str(tmp_path / "no-checkpoint"), None, None, connect(f"sqlite:///{tmp_path}/m.db"))
    with pytest.raises(
        FileNotFoundError, match=r"eval.split 'test': no test.manifest.json .*shard that split"
    ):
        evaluate_trained(config, absent)  # named before the (missing) checkpoint is read
    config = load_config(None, [*overrides, "eval.split=val"])
    with pytest.raises(
        ConfigError, match=rf"^the checkpoint {tmp_path}/no-checkpoint: no such file or checkpoint$"
    ):
        evaluate_trained(config, absent)  # one line, not a traceback from Ray's checkpoint reader
