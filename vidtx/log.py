"""One log format for every vidtx process, and rich progress bars for long work."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"

T = TypeVar("T")


def setup_logging(level: int | str = logging.INFO) -> None:
    """Configure the root logger once (stderr, one format); later calls only change the level."""
    root = logging.getLogger()
    if not any(getattr(handler, "_vidtx", False) for handler in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
        handler._vidtx = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a progress bar on stderr (hidden when stderr is not a terminal)."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True, disable=not sys.stderr.isatty()) as progress:
        yield from progress.track(items, total=total, description=description)
