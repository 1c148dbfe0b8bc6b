"""Following a training run from the process that started it, through its MLflow run."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator

from mlflow import MlflowClient

from vidtx.tracking.rank_zero import STEP_METRIC
from vidtx.tracking.runs import last_logged_step

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int, dict[str, float]], None]  # (step, max_steps, latest metrics)


@contextlib.contextmanager
def follow_progress(
    client: MlflowClient,
    run_id: str,
    max_steps: int,
    progress: ProgressCallback | None,
    interval: float = 5.0,
) -> Iterator[None]:
    """While the body runs, poll the MLflow run and call `progress(step, max_steps, metrics)` on news.

    The callback runs on a daemon thread that carries the caller's context variables (so a Prefect task
    can update its artifacts from it); a failing callback never breaks training.
    """
    if progress is None:
        yield
        return
    stop = threading.Event()

    def poll() -> None:
        reported = -1
        while True:
            finished = stop.wait(interval)
            try:
                step = last_logged_step(client, run_id, STEP_METRIC)
                if step > reported:
                    progress(step, max_steps, dict(client.get_run(run_id).data.metrics))
                    reported = step
            except Exception:
                logger.debug("progress poll failed", exc_info=True)
            if finished:
                return

    thread = threading.Thread(target=contextvars.copy_context().run, args=(poll,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=60)
