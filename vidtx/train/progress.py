"""Following a training run from the process that started it, through its MLflow run."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator

from mlflow import MlflowClient

from vidtx.log import progress_bar
from vidtx.tracking.rank_zero import STEP_METRIC
from vidtx.tracking.runs import last_logged_step

logger = logging.getLogger(__name__)

# (step, max_steps, latest metrics, the line of a validation result new since the last call, else None)
ProgressCallback = Callable[[int, int, dict[str, float], str | None], None]
VALIDATION_METRIC = "val/loss"  # what every objective's validation logs
DATA_WAIT_METRIC = "train/data_wait"


@contextlib.contextmanager
def follow_progress(
    client: MlflowClient,
    run_id: str,
    max_steps: int,
    progress: ProgressCallback | None = None,
    interval: float = 5.0,
) -> Iterator[None]:
    """While the body runs, poll the MLflow run: on news, move a progress bar (on a terminal), log one
    line per new validation result and call `progress(step, max_steps, metrics, validation line)`.

    The poll runs on a daemon thread that carries the caller's context variables (so a Prefect task
    can update its artifacts from it); a failing poll or callback never breaks training.
    """
    stop = threading.Event()

    def poll(show: Callable[[int, str], None]) -> None:
        reported, validated = -1, -1
        while True:
            finished = stop.wait(interval)
            try:
                # both, each time: a step's validation is logged after its loss, so a poll between
                # the two sees the step without it
                step = last_logged_step(client, run_id, STEP_METRIC)
                validation = last_logged_step(client, run_id, VALIDATION_METRIC)
                if step > reported or validation > validated:
                    metrics = dict(client.get_run(run_id).data.metrics)
                    show(step, _progress_text(metrics))
                    line = validation_line(validation, metrics) if validation > validated else None
                    if line is not None:
                        logger.info(line)
                    if progress is not None:
                        progress(step, max_steps, metrics, line)
                    reported, validated = step, validation
            except Exception:
                logger.debug("progress poll failed", exc_info=True)
            if finished:
                return

    with progress_bar("train", max_steps) as show:
        thread = threading.Thread(target=contextvars.copy_context().run, args=(poll, show), daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=60)


def _progress_text(metrics: dict[str, float]) -> str:
    """The bar's text: the loss, and the share of time the ranks waited for data."""
    parts = [f"loss {metrics[STEP_METRIC]:.3f}"] if STEP_METRIC in metrics else []
    if DATA_WAIT_METRIC in metrics:
        parts.append(f"data wait {metrics[DATA_WAIT_METRIC]:.0%}")
    return " ".join(parts)


VALIDATION_FIGURES = (
    ("val/top1", "top-1"),
    ("val/top5", "top-5"),
    ("val/mean_ap", "mAP"),
    ("val/loss", "loss"),
)


def validation_line(step: int, metrics: dict[str, float]) -> str:
    """The log line of the validation at `step`, from the run's latest `metrics`: those of its
    objective (a classifier's top-1 and top-5, a multi-label classifier's mAP) and the loss."""
    figures = ", ".join(f"{name} {metrics[key]:.3f}" for key, name in VALIDATION_FIGURES if key in metrics)
    return f"step {step}: validation {figures}"
