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
