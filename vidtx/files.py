"""Files that are complete or absent: each is written under a temporary name beside its own and renamed
into place (a rename within a folder is atomic), so a reader or a re-run never takes a half-written
file for a whole one.

When the write fails (a full disk, a read-only folder) the temporary file is removed, and the OSError
names the file being written: a failed `write()` raises ENOSPC without any file name. `one_line`
says an OSError the way people read it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

TEMPORARY_SUFFIX = ".tmp"


def temporary_path(path: Path) -> Path:
    """Where `path` is written before it is renamed into place: `<name>.tmp` beside it."""
    return path.with_name(path.name + TEMPORARY_SUFFIX)


@contextlib.contextmanager
def replaced(path: Path) -> Iterator[Path]:
    """Yields the temporary name to write `path` under; renames it to `path` when the block ends,
    removes it when the block raises (an OSError about it then names `path`)."""
    temporary = temporary_path(path)
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException as err:
        temporary.unlink(missing_ok=True)
        if isinstance(err, OSError) and err.errno is not None and err.filename in (None, str(temporary)):
            raise OSError(err.errno, err.strerror, str(path)) from err  # OSError() picks the subclass
        raise


def write_text(path: Path, text: str) -> Path:
    """Write `text` to `path`, complete or not at all."""
    with replaced(path) as temporary:
        temporary.write_text(text)
    return path


def one_line(err: OSError) -> str:
    """`PATH: what the errno means` (`A -> B: ...` for a rename), without Python's `[Errno N]` and
    quotes; the message itself for an OSError that names no file."""
    if err.strerror is None or err.filename is None:
        return str(err)
    paths = [str(name) for name in (err.filename, err.filename2) if name is not None]
    return f"{' -> '.join(paths)}: {err.strerror}"
