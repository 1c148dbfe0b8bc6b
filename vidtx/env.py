"""Process-wide environment defaults for the services vidtx drives.

Applied by the entry points (CLI, flows, tests), never on library import. `setdefault` only: a value
the user exported always wins. Shell scripts take them from `python -m vidtx.env` (export lines).
"""

from __future__ import annotations

import os

DEFAULTS: dict[str, str] = {
    # A fresh Prefect database takes ~25 s to migrate on 2 cores; the default 20 s start-up times out.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    # Telemetry off: no network calls from CI or air-gapped clusters (and no sqlite lock races).
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "RAY_USAGE_STATS_ENABLED": "0",
    # Ray Train on a local Ray instance (one that `ray.init` starts from this process): its controller
    # notices a started or finished worker group within 0.5 s, not 2 s (about 3 s of every run), and
    # starts no preemption watcher (an actor that waits for a cloud's node drains, which one machine
    # has none of). A cluster's nodes (`make stack`, infra/) keep Ray's defaults.
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    # A run started from the Prefect UI begins within 2 s, not 10: the worker asks for runs that often.
    "PREFECT_WORKER_QUERY_SECONDS": "2",
    # Libraries draw no progress bars of their own (MLflow's artifact downloads, DeepSpeed's
    # checkpoint consolidation through tqdm): vidtx draws one per stage (vidtx.log).
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "TQDM_DISABLE": "1",
}


def apply_defaults() -> None:
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)


if __name__ == "__main__":
    for name, value in DEFAULTS.items():
        print(f"export {name}=${{{name}:-{value}}}")
