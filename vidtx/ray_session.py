"""Use the Ray instance that is already connected, or start (and later stop) one for a piece of work."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import psutil
import ray
from ray._private import ray_constants, services
from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
from ray._private.worker import filter_autoscaler_events

from vidtx.log import adopt_loggers, owns_console

JOB_CONFIG_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray in the environment of a Ray Job's driver
RAY_PRINTER = "ray_print_logs"  # the handler through which `ray.init` prints the workers' output
WORKER_OUTPUT_HANDLER = "vidtx_worker_output"
LOOPBACK = ("127.0.0.1", "::1", "localhost", None)
WORKER_EXIT_GRACE_S = 10.0  # how long a local Ray's workers have to exit once `ray.shutdown()` returns
worker_output = logging.getLogger("ray.workers")
logger = logging.getLogger(__name__)

# Not credentials: those come from each node's own environment (or its instance role), never from a
# runtime environment that Ray shows in its dashboard.
WORKER_ENV_VARS = (
    *("MLFLOW_TRACKING_URI", "DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR"),
    *("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION"),
)


CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN", "AWS_SESSION_TOKEN")


@contextlib.contextmanager
def tune_trial_environment() -> Iterator[None]:
    """Within the block, the environment Ray Tune gives its trial actors (and they pass on to what
    they start) is vidtx's, not Ray 2.60's (`ray.tune.execution.class_cache`):
    - no AWS credentials of this process: Tune copies them into the trials' runtime env, which Ray's
      dashboard and its runtime-env agent's log show. Trials get them as every Ray worker does, from
      the node's environment;
    - RAY_ADDRESS, the Ray this process is connected to: Ray Train's placement-group cleaner asks the
      State API whether its controller lives, and without an address the API refuses where another
      Ray runs on the machine; a trial stopped early then kept its workers' CPUs for ever.
    `tests/test_sweep.py` notices when a Ray upgrade changes this."""
    from ray.tune.execution import class_cache

    propagated, defaults = class_cache.ENV_VARS_TO_PROPAGATE, class_cache.DEFAULT_ENV_VARS
    class_cache.ENV_VARS_TO_PROPAGATE = propagated - set(CREDENTIALS)
    class_cache.DEFAULT_ENV_VARS = defaults | {"RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    try:
        yield
    finally:
        class_cache.ENV_VARS_TO_PROPAGATE, class_cache.DEFAULT_ENV_VARS = propagated, defaults


def worker_env() -> dict[str, str]:
    """The variables of this process that Ray workers (local, on a cluster or in a Ray Job) must see too."""
    return {name: os.environ[name] for name in WORKER_ENV_VARS if name in os.environ}


@contextlib.contextmanager
def ray_session(address: str | None = None, **init_kwargs: Any) -> Iterator[None]:
    """`ray.init(address, ...)` unless Ray is initialised already; shuts down only what it started.

    Without an address (and without RAY_ADDRESS, or with RAY_ADDRESS pointing at a Ray Jobs API) Ray
    starts a local instance on this machine, listening on 127.0.0.1 only.
    """
    if ray.is_initialized():
        connected = ray.get_runtime_context().gcs_address
        if address not in (None, "auto", "local", connected):
            logger.warning(
                "this process is already connected to Ray at %s: using it, not %s", connected, address
            )
        yield
        return
    in_ray_job = bool(os.environ.get(JOB_CONFIG_VARIABLE))
    if in_ray_job:
        # a Ray Job's driver: the job's runtime env reaches every worker already, and Ray refuses to
        # merge a second one that sets the same fields
        init_kwargs.pop("runtime_env", None)
    address = address or _cluster_from_environment()
    on_loopback = address == "local" or is_loopback(address or os.environ.get("RAY_ADDRESS", ""))
    adopt_loggers()  # Ray's driver-side records (start-up, warnings) go where vidtx's go
    loopback_only = _on_loopback_only() if on_loopback else contextlib.nullcontext()
    with loopback_only, _sigterm_kept(), _own_process_groups():
        ray.init(address=address, **init_kwargs)
    # Inside a Ray Job the job's log is the console its submitter follows: Ray keeps printing there.
    if owns_console() and not in_ray_job:
        dispatcher.remove_handler(RAY_PRINTER)
        dispatcher.add_handler(WORKER_OUTPUT_HANDLER, _log_worker_output)
    raylets = [child for child in psutil.Process().children() if child.name() == "raylet"]  # a local Ray's
    try:
        yield
    finally:
        dispatcher.remove_handler(WORKER_OUTPUT_HANDLER)
        ray.shutdown()
        for raylet in raylets:
            _end_workers_outliving(raylet.pid)


def _end_workers_outliving(raylet_pid: int, grace: float = WORKER_EXIT_GRACE_S) -> None:
    """Kill the workers of a local Ray that outlive its raylet, each named in a warning.

    Ray asks an actor whose handle is gone to exit and never forces it; a worker whose exit then
    waits (a thread that does not end) is reparented to init once `ray.shutdown()` ends the raylet,
    and past its core worker's shutdown nothing in it notices: it stays for as long as the machine
    runs (a 490 MB `ray::TrainController` was found 37 minutes after a `make test`). Every worker
    carries its raylet's pid in RAY_RAYLET_PID."""
    workers = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("RAY_RAYLET_PID") == str(raylet_pid):
                workers.append(process)
    _, outliving = psutil.wait_procs(workers, timeout=grace)
    for process in outliving:
        with contextlib.suppress(psutil.Error):
            logger.warning("%s (pid %d) outlived its local Ray: killed", process.name(), process.pid)
            process.kill()
    psutil.wait_procs(outliving, timeout=10)


def _log_worker_output(batch: dict[str, Any]) -> None:
    """What Ray's workers write (prints, warnings, their log records) as records of `ray.workers`
    (INFO) instead of Ray's prints on the driver's console, in a process whose logging vidtx set up:
    in the log file, on the console with --verbose. `tests/test_log.py` notices when a Ray upgrade
    changes this hook (ray._private)."""
    lines = batch.get("lines", [])
    if batch.get("pid") == "autoscaler":  # its status every 5 s; Ray prints only its events
        lines = list(filter_autoscaler_events(lines))
    who = batch.get("actor_name") or batch.get("task_name") or ""
    where = "" if batch.get("ip") in LOOPBACK else f", ip={batch.get('ip')}"
    origin = f"({who} pid={batch.get('pid')}{where})"
    for line in lines:
        worker_output.info("%s %s", origin, line)


def is_jobs_api(address: str | None) -> bool:
    """Whether `address` is a Ray Jobs API (http://head:8265): where training submits jobs, not a
    cluster that `ray.init` joins or sends tasks to."""
    return bool(address) and address.startswith(("http://", "https://"))


def is_loopback(address: str) -> bool:
    """Whether `address` (host:port of a cluster's GCS) is on this machine's loopback interface."""
    host = address.rpartition(":")[0].strip("[]")
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name, "auto", a ray:// address
        return False


def _cluster_from_environment() -> str | None:
    """None where RAY_ADDRESS names a cluster (ray.init reads it), else "local": a new local instance."""
    from_environment = os.environ.get("RAY_ADDRESS", "")
    return None if from_environment and not is_jobs_api(from_environment) else "local"


@contextlib.contextmanager
def _on_loopback_only() -> Iterator[None]:
    """Start a local Ray whose GCS, raylet, workers and agents listen on 127.0.0.1, not 0.0.0.0 / ::,
    or join a cluster at a loopback address (`make stack`'s nodes: `infra/local/ray_node.py`) as it is.

    Ray binds its servers to every interface unless the node's address is a loopback one, and it turns
    `ray.init(_node_ip_address="127.0.0.1")` and a cluster address of 127.0.0.1 back into the
    machine's network address (Ray 2.60: `services.resolve_ip_for_localhost`). It keeps the loopback
    address where it may not form a cluster (its macOS / Windows default, `ray_constants.ENABLE_RAY_CLUSTER`),
    which a local instance for one run on one machine is, and a driver joining a cluster on this
    machine's loopback need not: so that is what it is told while it starts or joins.
    `tests/test_reliability.py::test_local_ray_is_on_loopback_only_outside_the_driver_s_group`
    notices when a Ray upgrade changes this.
    """
    may_form_cluster = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = may_form_cluster


@contextlib.contextmanager
def _own_process_groups() -> Iterator[None]:
    """Start the processes of a local Ray (GCS, raylet and the workers and agents it starts,
    dashboard, monitors) outside this process's process group, so that a signal to the group reaches
    the driver alone, which then stops its Ray in order.

    Prefect's worker cancels a flow run with SIGTERM to the run's whole process group. Ray's
    processes shared it: the raylet died at once, and the driver's core worker, told its node was
    gone, tried to recover an object through the dead raylet's store and ended the process (exit
    code 1, "The connection to the plasma store is failed. Terminate the process") before Python
    unwound: the run was left Running and its MLflow run unended, by chance. Ray already keeps
    its children out of a group's SIGINT (Ctrl-C) by blocking it in them; they still die with the
    driver through their parent-death signal (kernel fate-sharing). Ray 2.60 starts every one of them
    through `services.ConsolePopen`; `tests/test_reliability.py::
    test_local_ray_is_on_loopback_only_outside_the_driver_s_group` notices when an upgrade changes that."""
    start_process = services.ConsolePopen
    services.ConsolePopen = functools.partial(start_process, process_group=0)
    try:
        yield
    finally:
        services.ConsolePopen = start_process


@contextlib.contextmanager
def _sigterm_kept() -> Iterator[None]:
    """Keep the process's own SIGTERM handling across `ray.init`. Ray's core worker installs a C
    handler that dumps a stack and aborts on SIGTERM (exit -6, nothing unwound: the local Ray and the
    MLflow run were left behind); the handler Python had (vidtx's `sigterm_raises`, Prefect's
    cancellation bridge, or the default) is put back."""
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)
