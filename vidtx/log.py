"""One log format for every vidtx process, and rich progress bars for long work."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"

T = TypeVar("T")


# Loggers whose INFO records are one line per HTTP request (Prefect's and MLflow's clients): shown with
# --verbose only. A `vidtx pipeline` run of the demo printed 235 of them.
CHATTY_LOGGERS = ("httpx", "httpcore")


def setup_logging(level: int | str = logging.INFO, log_file: Path | None = None) -> None:
    """Configure the root logger (stderr, one format); later calls change the level and add files.

    It is the only console handler on the root: one another library installed there (Prefect's
    console handler) would print every record a second time. `log_file`: every record also goes
    there (appended)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if _is_console(handler) and not getattr(handler, "_vidtx", False):
            root.removeHandler(handler)
    if not any(getattr(handler, "_vidtx", False) for handler in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
        handler._vidtx = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(log_file)
        to_file.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
        root.addHandler(to_file)
    root.setLevel(level)
    chatty = logging.DEBUG if root.getEffectiveLevel() <= logging.DEBUG else logging.WARNING
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(chatty)


def _is_console(handler: logging.Handler) -> bool:
    return (
        isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and getattr(handler, "stream", None) in (sys.stderr, sys.stdout)
    )


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a progress bar on stderr (hidden when stderr is not a terminal)."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True, disable=not sys.stderr.isatty()) as progress:
        yield from progress.track(items, total=total, description=description)
