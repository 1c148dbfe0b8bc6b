"""Use the Ray instance that is already connected, or start (and later stop) one for a piece of work."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import ray

JOB_CONFIG_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray in the environment of a Ray Job's driver


@contextlib.contextmanager
def ray_session(address: str | None = None, **init_kwargs: Any) -> Iterator[None]:
    """`ray.init(address, ...)` unless Ray is initialised already; shuts down only what it started.

    Without an address (and without RAY_ADDRESS, or with RAY_ADDRESS pointing at a Ray Jobs API) Ray
    starts a local instance on this machine.
    """
    if ray.is_initialized():
        yield
        return
    if os.environ.get(JOB_CONFIG_VARIABLE):
        # a Ray Job's driver: the job's runtime env reaches every worker already, and Ray refuses to
        # merge a second one that sets the same fields
        init_kwargs.pop("runtime_env", None)
    if address is None and os.environ.get("RAY_ADDRESS", "").startswith(("http://", "https://")):
        address = "local"  # RAY_ADDRESS names a Jobs API (for training), not a cluster to connect to
    ray.init(address=address, **init_kwargs)
    try:
        yield
    finally:
        ray.shutdown()
