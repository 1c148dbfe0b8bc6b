"""Annotation lists: a CSV with `path`, `label` (and `split`) columns, or a JSON array of
`{"path", "label", "split"}` objects, read the same way.

Paths are relative to the video root and must stay inside it; `split` defaults to "train". A CSV's
label column holds one name, or, with `shard.label_separator`, a set of names ("a|b"): the source is
then multi-label. A JSON row's `label` is a name or a list of names; one list anywhere makes the
source multi-label (every row's label a set, of one name where a string is given). A row that cannot
be used keeps its place as a reject: malformed (a JSON entry that is not such an object, an empty
path), an empty label list ("", "|", []), outside the video root, an unknown label (`labelled`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from vidtx import storage
from vidtx.locations import Location
from vidtx.shard.annotations import empty_field_problem, read_csv_rows, read_json
from vidtx.shard.records import (
    Row,
    Source,
    beside,
    empty_labels_problem,
    labelled,
    outside_root_problem,
    split_labels,
    split_name,
    unique_keys,
)
from vidtx.storage import join, name_of


class Entry(NamedTuple):
    """One row of a list as written, before its path is resolved and its labels are looked up."""

    where: str  # file:line or file[index]
    path: str  # as written: relative to the video root
    label_names: tuple[str, ...]
    split: str
    problem: str | None


def read_csv(
    path: Location,
    video_root: Location,
    classes: Sequence[str] | None = None,
    separator: str | None = None,
) -> Source:
    """A CSV list; with `separator`, the label column holds label sets and the source is multi-label."""
    entries = []
    for where, fields, problem in read_csv_rows(path, {"path", "label"}):
        split = split_name(fields.get("split") or "train", beside(path, where))
        names = split_labels(fields["label"], separator)
        required = ("path", "label") if separator is None else ("path",)
        problem = problem or empty_field_problem(fields, required, where)
        if problem is None and not names:
            problem = empty_labels_problem(fields["label"], where)
        entries.append(Entry(where, fields["path"], names, split, problem))
    return _listed(path, video_root, entries, classes, multi_label=separator is not None)


def _json_labels(label: Any) -> tuple[str, ...] | None:
    """The names of a JSON row's label (a name or a list of names); None when it is neither."""
    if isinstance(label, str):
        return split_labels(label, None)
    if isinstance(label, list) and all(isinstance(name, str) for name in label):
        return tuple(dict.fromkeys(name.strip() for name in label if name.strip()))
    return None


def _json_entry(file: Location, where: str, row: Any) -> Entry:
    written_split = row.get("split", "train") if isinstance(row, dict) else "train"
    split = split_name(written_split if isinstance(written_split, str) else "train", beside(file, where))
    if not isinstance(row, dict):
        return Entry(where, "", (), split, f"malformed row: {where} is not an object")
    names = _json_labels(row.get("label"))
    if not (isinstance(row.get("path"), str) and row["path"].strip()):
        problem = f"malformed row: {where} has no 'path' string"
    elif names is None:
        problem = f"malformed row: {where} has a 'label' that is not a name or a list of names"
    elif not isinstance(written_split, str):
        problem = f"malformed row: {where} has a 'split' that is not a string"
    else:
        problem = None if names else empty_labels_problem(row["label"], where)
    return Entry(where, str(row.get("path", "")).strip(), names or (), split, problem)


def read_json_list(path: Location, video_root: Location, classes: Sequence[str] | None = None) -> Source:
    """A JSON array of `{"path", "label", "split"}` objects; multi-label when a label is a list."""
    rows = read_json(path, list)
    entries = [_json_entry(path, f"{name_of(path)}[{index}]", row) for index, row in enumerate(rows)]
    multi_label = any(isinstance(row, dict) and isinstance(row.get("label"), list) for row in rows)
    return _listed(path, video_root, entries, classes, multi_label=multi_label)


def _listed(
    file: Location,
    video_root: Location,
    entries: Iterable[Entry],
    classes: Sequence[str] | None,
    multi_label: bool,
) -> Source:
    """Labelled records of a list's entries: paths resolved inside the video root, keys made unique."""
    resolved = []  # (entry, path relative to the video root, problem)
    for entry in entries:
        relative = storage.inside(entry.path, video_root) if entry.problem is None else None
        problem = entry.problem
        if problem is None and relative is None:
            problem = outside_root_problem(entry.path, video_root, entry.where)
        resolved.append((entry, relative, problem))
    keys = iter(unique_keys([relative for _, relative, problem in resolved if problem is None]))
    rows = [
        Row(entry.where, entry.where, file, entry.label_names, entry.split, problem)
        if problem
        else Row(
            entry.where, next(keys), join(video_root, relative.as_posix()), entry.label_names, entry.split
        )
        for entry, relative, problem in resolved
    ]
    return labelled(video_root, rows, classes, multi_label=multi_label)
