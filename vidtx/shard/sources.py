"""Video datasets in the layouts people have, read into one list of labelled records.

Formats (`DatasetFormat`):

* folder: `ROOT/<split>/<class>/<video>` or, without splits, `ROOT/<class>/<video>` (all "train");
  see `folder.py` for how the layout is decided and what is ignored.
* kinetics: the Kinetics CSVs (`label,youtube_id,time_start,time_end,split`), one file or a folder of
  them; a video is found by its file stem `<youtube_id>_<start:06d>_<end:06d>` (or `<youtube_id>`)
  anywhere under the video root.
* ssv2: the Something-Something-v2 folder with `*labels.json`, `*train.json` and
  `*validation.json`; the label of a video is its template with the brackets removed, and the video
  is `<id>.webm` (or any video extension) anywhere under the video root.
* csv: a generic CSV with a header holding `path` and `label` (and optionally `split`, default
  "train"); paths are relative to the video root, and must stay inside it.
* json: a JSON array of `{"path", "label", "split"}` objects, read as csv is (`lists.py`); a label
  is a name or a list of names.

Multi-label: with `shard.label_separator` (csv, kinetics) the label column is a set of names ("a|b"),
and a json list whose labels include a list is one too; such a source is `multi_label` (see
`records.py`).

Split names are normalised ("Train " is "train"); one that cannot name files ("../x", "a/b") is an
`AnnotationError` naming the row (see `records.py`). Paths from annotations that lead outside the video
root ("../x", "/elsewhere/x", an SSv2 id "../../x") are row rejects. A dataset with no video and no
row at all is an error (`NothingToShardError`). A Kinetics folder's CSV without a label column (a
test split) is skipped with a warning and listed in `Source.ignored`.

The video root defaults to the annotation file's folder. Sources, video roots and annotation files
may be in a bucket (`s3://`, `gs://`): the walk is a listing and annotation files are read there;
only the process that writes a shard downloads its videos (`vidtx.shard.writer`).

Bad annotations: a file that cannot be used as a whole (not UTF-8, not JSON, missing columns, a
wrong delimiter) raises `AnnotationError`. A bad row keeps its place as a record with a `problem`
(malformed row, unknown label, duplicate key), which the sharding job reports as a reject, like a
listed video that is missing ("missing"), so one bad row never stops a job or goes unreported.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vidtx import storage
from vidtx.config import ConfigError, DatasetFormat
from vidtx.locations import Location, location
from vidtx.shard.annotations import (
    AnnotationError,
    MissingColumnsError,
    empty_field_problem,
    read_csv_rows,
    read_json,
)
from vidtx.shard.folder import read_folder, walk
from vidtx.shard.lists import read_csv, read_json_list
from vidtx.shard.records import (
    UNLABELLED,
    Ignored,
    Row,
    Source,
    VideoRecord,
    beside,
    empty_labels_problem,
    labelled,
    outside_root_problem,
    split_labels,
    split_name,
)
from vidtx.shard.unlabeled import read_unlabeled
from vidtx.storage import join, name_of, parent_of

__all__ = ["UNLABELLED", "NothingToShardError", "Source", "VideoRecord", "read_folder", "read_source"]

log = logging.getLogger(__name__)


class NothingToShardError(ValueError):
    """The dataset holds no video and no annotation row: there is nothing to shard."""


def _index_videos(root: Location) -> dict[str, Location]:
    """Video files under `root` by file stem (the first in sorted order wins on duplicates)."""
    index: dict[str, Location] = {}
    for file in walk(root)[0]:
        if file.kind == "file" and file.is_video:
            index.setdefault(Path(file.parts[-1]).stem, file.path)
    return index


KINETICS_COLUMNS = ("label", "youtube_id", "time_start", "time_end", "split")


def _kinetics_times(fields: dict[str, str], where: str) -> tuple[int, int] | str:
    """(start, end) in whole seconds, or the problem: times must be finite, >= 0 and start <= end."""
    times = f"{fields['time_start']!r}, {fields['time_end']!r}"
    try:
        start, end = float(fields["time_start"]), float(fields["time_end"])
    except ValueError:
        return f"malformed row: {where} has times that are not numbers ({times})"
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start <= end):
        return f"malformed row: {where} has times that are not finite, >= 0 and start <= end ({times})"
    return int(start), int(end)


def _kinetics_row(
    file: Location,
    where: str,
    fields: dict[str, str],
    problem: str | None,
    index: dict[str, Location],
    video_root: Location,
    separator: str | None,
) -> Row:
    """The row of the video `<youtube_id>_<start:06d>_<end:06d>` (found by that stem or by the id)."""
    split = split_name(fields["split"] or "train", beside(file, where))
    names = split_labels(fields["label"], separator)
    problem = problem or empty_field_problem(fields, KINETICS_COLUMNS[1:], where)
    if problem is None and not names:
        problem = empty_labels_problem(fields["label"], where)
    times = _kinetics_times(fields, where) if problem is None else problem
    if isinstance(times, str):
        return Row(where, where, file, names, split, times)
    stem = f"{fields['youtube_id']}_{times[0]:06d}_{times[1]:06d}"
    if storage.inside(f"{stem}.mp4", video_root) is None:
        problem = outside_root_problem(fields["youtube_id"], video_root, where)
        return Row(where, where, file, names, split, problem)
    video = index.get(stem) or index.get(fields["youtube_id"]) or join(video_root, f"{stem}.mp4")
    return Row(where, stem, video, names, split)


def _kinetics_file_rows(
    file: Location, in_folder: bool
) -> tuple[list[tuple[str, dict[str, str], str | None]], Ignored | None]:
    """The rows of one Kinetics CSV; in a folder of them, a CSV without a label column (the Kinetics
    test split) is skipped with a warning, as `Ignored`, instead of failing the whole dataset."""
    try:
        return list(read_csv_rows(file, set(KINETICS_COLUMNS))), None
    except MissingColumnsError as err:
        if not in_folder or err.missing != {"label"}:
            raise
    reason = "no 'label' column: unlabelled rows (a test split?) cannot be trained or evaluated on"
    log.warning("skipping %s: %s", file, reason)
    return [], Ignored(file, reason)


def read_kinetics(
    path: Location,
    video_root: Location,
    classes: Sequence[str] | None = None,
    separator: str | None = None,
) -> Source:
    """Kinetics CSVs; with `separator`, the label column holds label sets and the source is multi-label."""
    in_folder = not storage.is_file(path)
    files = [join(path, name) for name in storage.names(path, ".csv")] if in_folder else [path]
    index = _index_videos(video_root)
    rows, ignored = [], []
    for file in files:
        file_rows, skipped = _kinetics_file_rows(file, in_folder)
        ignored.extend([skipped] if skipped else [])
        for where, fields, problem in file_rows:
            if fields["label"] or problem:  # unlabelled test rows cannot be trained or evaluated on
                rows.append(_kinetics_row(file, where, fields, problem, index, video_root, separator))
    return labelled(video_root, rows, classes, ignored=ignored, multi_label=separator is not None)


def _class_id(value: object) -> int:
    """A class id of the SSv2 label file: an integer or a string of one ("2"); 2.9 or True are not."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return int(value)
    raise ValueError(f"{value!r} is not an integer")


def _ssv2_classes(labels_file: Location) -> list[str]:
    """Templates ordered by their id in the label file (`{"<template>": "<id>", ...}`)."""
    labels = read_json(labels_file, dict)
    try:
        ids = {name: _class_id(value) for name, value in labels.items()}
    except ValueError as err:
        raise AnnotationError(f"{labels_file}: every class id must be an integer ({err})") from err
    if len(set(ids.values())) != len(ids):
        raise AnnotationError(f"{labels_file}: class ids are not distinct")
    return sorted(ids, key=ids.__getitem__)


def _ssv2_row(
    entry: Any, list_file: Location, where: str, split: str, index: dict[str, Location], video_root: Location
) -> Row:
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("id"), str)
        and isinstance(entry.get("template"), str)
    ):
        problem = f"malformed row: {where} is not an object with string 'id' and 'template'"
        return Row(where, where, list_file, (), split, problem)
    name = entry["template"].replace("[", "").replace("]", "")
    if storage.inside(f"{entry['id']}.webm", video_root) is None:
        problem = outside_root_problem(entry["id"], video_root, where)
        return Row(where, where, list_file, (name,), split, problem)
    video = index.get(entry["id"]) or join(video_root, f"{entry['id']}.webm")
    return Row(where, entry["id"], video, (name,), split)


def read_ssv2(path: Location, video_root: Location) -> Source:
    folder = parent_of(path) if storage.is_file(path) else path
    labels_file = next((join(folder, name) for name in storage.names(folder, "labels.json")), None)
    if labels_file is None:
        raise AnnotationError(f"{folder}: no *labels.json (the Something-Something-v2 label file)")
    classes = _ssv2_classes(labels_file)
    index = _index_videos(video_root)
    rows = [
        _ssv2_row(entry, list_file, f"{name_of(list_file)}[{position}]", split, index, video_root)
        for split in ("train", "validation")
        for list_file in (join(folder, name) for name in storage.names(folder, f"{split}.json"))
        for position, entry in enumerate(read_json(list_file, list))
    ]
    return labelled(video_root, rows, classes, name_of(labels_file))


def _nothing_to_shard(path: Location, source: Source) -> NothingToShardError:
    detail = ""
    if source.ignored:
        first = source.ignored[0]
        detail = f"; {len(source.ignored)} file(s) ignored, e.g. {first.path} ({first.reason})"
    return NothingToShardError(f"{path}: nothing to shard: no videos or annotation rows found{detail}")


def read_source(
    path: Location,
    format: DatasetFormat,
    *,
    video_root: Location | None = None,
    classes: Sequence[str] | None = None,
    label_separator: str | None = None,
) -> Source:
    """Read a dataset; `video_root` (default: the dataset folder or the annotation file's folder)
    is where the annotation formats look for video files. `classes` is the label set (label id =
    position); rows of other classes become "unknown label" rejects. By default the classes are
    those the annotations name; for ssv2 always those of the label file. `label_separator` (csv and
    kinetics) splits the label column into label sets: the source is multi-label."""
    path = location(path)
    storage.check(path)
    if not storage.exists(path):
        raise FileNotFoundError(f"{path}: no such dataset")
    if format == "ssv2" and classes is not None:
        raise ValueError("ssv2 takes its classes from its *labels.json; do not pass classes")
    if label_separator is not None and format not in ("csv", "kinetics"):
        raise ValueError(f"label_separator applies to formats csv and kinetics, not {format}")
    is_folder = not storage.is_file(path)
    _check_layout(path, format, is_folder)
    root = location(video_root) if video_root is not None else (path if is_folder else parent_of(path))
    if format == "unlabeled":
        source = read_unlabeled(path, root, is_folder)
    elif format == "folder":
        source = read_folder(path, classes)
    elif format == "csv":
        source = read_csv(path, root, classes, label_separator)
    elif format == "json":
        source = read_json_list(path, root, classes)
    elif format == "kinetics":
        source = read_kinetics(path, root, classes, label_separator)
    else:
        source = read_ssv2(path, root)
    if not source.records:
        raise _nothing_to_shard(path, source)
    return source


def _check_layout(path: Location, format: DatasetFormat, is_folder: bool) -> None:
    """ConfigError when the source is a file where `format` reads a folder or the other way round
    (the default format, csv, given a folder of class folders is the usual case)."""
    if format == "folder" and not is_folder:
        raise ConfigError(f"shard.source {path}: a file, but shard.format=folder reads a dataset folder")
    if format == "json" and is_folder:
        raise ConfigError(f"shard.source {path}: a folder, but shard.format=json reads an annotation file")
    if format == "csv" and is_folder:
        raise ConfigError(
            f"shard.source {path}: a folder, but shard.format is csv (the default), which reads an "
            "annotation file: set shard.format=folder for a folder of class folders"
        )
