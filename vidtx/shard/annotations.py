"""Reading annotation files: one-line errors for files that cannot be used, problems for bad rows.

A file that is unusable as a whole (not UTF-8, not JSON, no header, missing columns, a wrong
delimiter) raises `AnnotationError`, naming the file and the reason. A CSV row with the wrong number
of fields comes back with its problem set, so the caller can report it and go on with the others.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Iterator, Sequence
from typing import Any

from vidtx import storage
from vidtx.locations import Location
from vidtx.storage import name_of


class AnnotationError(ValueError):
    """An annotation file that cannot be used at all; the message names the file and the reason."""


class MissingColumnsError(AnnotationError):
    """A CSV whose header lacks required columns (`missing`)."""

    def __init__(self, message: str, missing: set[str]) -> None:
        super().__init__(message)
        self.missing = missing


def _delimiter_hint(header: Sequence[str]) -> str:
    delimiter = next((d for d in ";\t|" if len(header) == 1 and d in header[0]), None)
    return f" (the header looks {delimiter!r}-separated: use commas)" if delimiter else ""


def read_csv_rows(path: Location, required: set[str]) -> Iterator[tuple[str, dict[str, str], str | None]]:
    """(`file:line`, stripped fields by column, problem) per data row of a comma-separated file whose
    header has the `required` columns (a leading UTF-8 byte order mark is accepted); the problem is
    set when the row has the wrong number of fields (missing fields read as empty)."""
    try:
        text = storage.read_bytes(path).decode("utf-8-sig")  # -sig: a leading BOM is not a column
        with io.StringIO(text, newline="") as file:
            reader = csv.reader(file)
            header = [name.strip() for name in next(reader, [])]
            if not header:
                raise AnnotationError(f"{path}: empty file (no header row)")
            missing = required - set(header)
            if missing:
                raise MissingColumnsError(
                    f"{path}: missing column(s) {sorted(missing)}; found {header}{_delimiter_hint(header)}",
                    missing,
                )
            for values in reader:
                if not values:
                    continue  # a blank line
                where = f"{name_of(path)}:{reader.line_num}"
                problem = None
                if len(values) != len(header):
                    problem = f"malformed row: {where} has {len(values)} fields, the header {len(header)}"
                stripped = [value.strip() for value in values[: len(header)]]
                yield where, dict(itertools.zip_longest(header, stripped, fillvalue="")), problem
    except UnicodeDecodeError as err:
        raise AnnotationError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start})") from err
    except csv.Error as err:
        raise AnnotationError(f"{path}: unreadable CSV ({err})") from err


def empty_field_problem(fields: dict[str, str], names: Sequence[str], where: str) -> str | None:
    """The problem of a row whose field among `names` is empty, if any."""
    empty = next((name for name in names if not fields[name]), None)
    return f"malformed row: {where} has an empty {empty!r}" if empty else None


def read_json(path: Location, kind: type[dict] | type[list]) -> Any:
    """The JSON object (`kind=dict`) or array (`kind=list`) that `path` holds."""
    try:
        value = json.loads(storage.read_bytes(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise AnnotationError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(value, kind):
        expected = "an object" if kind is dict else "an array"
        raise AnnotationError(f"{path}: expected {expected} at the top level, found {type(value).__name__}")
    return value
