"""One log format for every vidtx process, what of it reaches the console, and rich progress bars.

At default verbosity the console shows vidtx's own records (packages `vidtx` and `flows`) from INFO
and every other library's from ERROR; the log file, when there is one, gets every record from INFO.
With --verbose (VIDTX_VERBOSE=1) the console shows everything from DEBUG.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"
# Exported by `setup_logging`, so that the processes a run starts (the pipeline's flow process,
# Prefect's task processes, the shard pool) log the same way into the same file.
VERBOSE_VARIABLE = "VIDTX_VERBOSE"
LOG_FILE_VARIABLE = "VIDTX_LOG_FILE"
OWN_PACKAGES = frozenset({"vidtx", "flows", "benchmarks"})  # the repository's own code
# The program a person started (`python -m benchmarks.x`, their own script) logs under its main module's
# name: "__main__", and "__mp_main__" in the processes multiprocessing spawns from it.
MAIN_MODULES = frozenset({"__main__", "__mp_main__"})
# Loggers whose INFO records are one line per HTTP request (Prefect's and MLflow's clients): DEBUG
# only. A `vidtx pipeline` run of the demo printed 235 of them.
CHATTY_LOGGERS = ("httpx", "httpcore")
# Loggers that libraries give a stderr handler of their own and stop propagating when they are
# imported (Ray; MLflow for itself, alembic, SQLAlchemy and huey): `adopt_loggers` sends them to the root.
SELF_PRINTING_LOGGERS = ("ray", "mlflow", "alembic", "sqlalchemy.engine", "huey")

T = TypeVar("T")


def is_verbose() -> bool:
    return os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0")


class ConsolePolicy(logging.Filter):
    """Default verbosity: this repository's own records and the started program's from INFO, other
    libraries' from ERROR."""

    def filter(self, record: logging.LogRecord) -> bool:
        package = record.name.partition(".")[0]
        return record.levelno >= logging.ERROR or package in OWN_PACKAGES or package in MAIN_MODULES


FILE_ONLY = {"file_only": True}  # a record's `extra` for the log file alone: what the console prints itself


class NotForConsole(logging.Filter):
    """Records logged with `extra=FILE_ONLY` (a summary a command prints on stdout) stay off the console."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "file_only", False)


class ConsoleHandler(logging.StreamHandler):
    """Writes to `sys.stderr` as it is when a record comes: while a progress bar is live, rich
    redirects it so that log lines print above the bar instead of through it."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def setup_logging(verbose: bool | None = None, log_file: Path | None = None) -> None:
    """Configure the root logger: one console handler (stderr, one format), optionally a log file.

    `verbose` (default: VIDTX_VERBOSE) and `log_file` (default: VIDTX_LOG_FILE) are exported for
    child processes. Later calls change the verbosity and add files. The console handler is the only
    one on the root: another library's there (Prefect's) would print every record a second time, and
    Ray's and MLflow's own handlers are replaced by the root's (`adopt_loggers`).
    """
    verbose = is_verbose() if verbose is None else verbose
    os.environ[VERBOSE_VARIABLE] = "1" if verbose else "0"
    if not verbose:  # Prefect's own console handler, in processes that start from here
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "ERROR")
    root = logging.getLogger()
    for handler in list(root.handlers):
        if _is_console(handler) and not isinstance(handler, ConsoleHandler):
            root.removeHandler(handler)
    console = next((h for h in root.handlers if isinstance(h, ConsoleHandler)), None)
    if console is None:
        console = ConsoleHandler(sys.stderr)
        console.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
        root.addHandler(console)
    console.filters = [NotForConsole()] if verbose else [NotForConsole(), ConsolePolicy()]
    log_file = log_file or (
        Path(os.environ[LOG_FILE_VARIABLE]) if os.environ.get(LOG_FILE_VARIABLE) else None
    )
    if log_file is not None:
        _add_log_file(root, log_file.resolve())
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.captureWarnings(True)  # Python warnings are records of `py.warnings`: in the file
    adopt_loggers()


def _add_log_file(root: logging.Logger, log_file: Path) -> None:
    os.environ[LOG_FILE_VARIABLE] = str(log_file)
    if any(getattr(h, "baseFilename", None) == str(log_file) for h in root.handlers):
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    to_file = logging.FileHandler(log_file)
    to_file.setLevel(logging.INFO)
    to_file.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
    root.addHandler(to_file)


def adopt_loggers(names: Iterable[str] = SELF_PRINTING_LOGGERS) -> None:
    """Send the records of loggers that print on their own to the root's handlers instead, in a
    process whose console `setup_logging` took over (also after a library imported late)."""
    if not owns_console():
        return
    for name in names:
        logger = logging.getLogger(name)
        if logger.handlers or not logger.propagate:
            for handler in list(logger.handlers):
                if not isinstance(handler, logging.FileHandler):
                    logger.removeHandler(handler)
            logger.propagate = True


def owns_console() -> bool:
    """Whether `setup_logging` configured this process (else vidtx leaves logging alone)."""
    return any(isinstance(handler, ConsoleHandler) for handler in logging.getLogger().handlers)


def _is_console(handler: logging.Handler) -> bool:
    return (
        isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and getattr(handler, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    )


def _progress(*extra_columns: TextColumn) -> Progress:
    """A transient bar with count and ETA on stderr; hidden unless stderr is a terminal."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    return Progress(
        *columns,
        *extra_columns,
        console=Console(stderr=True),
        transient=True,
        disable=not sys.stderr.isatty(),
    )


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a progress bar on stderr (hidden when stderr is not a terminal)."""
    with _progress() as progress:
        yield from progress.track(items, total=total, description=description)


@contextlib.contextmanager
def progress_bar(description: str, total: int) -> Iterator[Callable[[int, str], None]]:
    """A progress bar for work reported from elsewhere (a training run followed through MLflow):
    yields `update(completed, status)`, where `status` is a short text shown after the ETA."""
    with _progress(TextColumn("{task.fields[status]}")) as progress:
        task = progress.add_task(description, total=total, status="")

        def update(completed: int, status: str = "") -> None:
            progress.update(task, completed=completed, status=status)

        yield update
