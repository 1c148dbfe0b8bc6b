"""Use the Ray instance that is already connected, or start (and later stop) one for a piece of work."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import ray


@contextlib.contextmanager
def ray_session(address: str | None = None, **init_kwargs: Any) -> Iterator[None]:
    """`ray.init(address, ...)` unless Ray is initialised already; shuts down only what it started.

    Without an address (and without RAY_ADDRESS, or with RAY_ADDRESS pointing at a Ray Jobs API) Ray
    starts a local instance on this machine.
    """
    if ray.is_initialized():
        yield
        return
    if address is None and os.environ.get("RAY_ADDRESS", "").startswith(("http://", "https://")):
        address = "local"  # RAY_ADDRESS names a Jobs API (for training), not a cluster to connect to
    ray.init(address=address, **init_kwargs)
    try:
        yield
    finally:
        ray.shutdown()
