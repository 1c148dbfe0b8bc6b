"""Video datasets in the layouts people have, read into one list of labelled records.

Formats (`DatasetFormat`):

* folder: `ROOT/<split>/<class>/<video>` or, without splits, `ROOT/<class>/<video>` (all "train").
* kinetics: the Kinetics CSVs (`label,youtube_id,time_start,time_end,split`), one file or a folder of
  them; a video is found by its file stem `<youtube_id>_<start:06d>_<end:06d>` (or `<youtube_id>`)
  anywhere under the video root.
* ssv2: the Something-Something-v2 folder with `*labels.json`, `*train.json` and
  `*validation.json`; the label of a video is its template with the brackets removed, and the video
  is `<id>.webm` (or any video extension) anywhere under the video root.
* csv: a generic CSV with a header holding `path` and `label` (and optionally `split`, default
  "train"); paths are relative to the video root.

The video root defaults to the annotation file's folder.

Bad annotations: a file that cannot be used as a whole (not UTF-8, not JSON, missing columns, a
wrong delimiter) raises `AnnotationError`. A bad row keeps its place as a record with a `problem`
(malformed row, unknown label, duplicate key), which the sharding job reports as a reject, like a
listed video that is missing ("missing"), so one bad row never stops a job or goes unreported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vidtx.config import DatasetFormat
from vidtx.manifest import VIDEO_EXTENSIONS
from vidtx.shard.annotations import AnnotationError, empty_field_problem, read_csv_rows, read_json

UNLABELLED = -1  # the label of a record whose row names no known class


@dataclass(frozen=True)
class VideoRecord:
    key: str  # unique within the dataset: relative path without suffix, YouTube id + times, SSv2 id
    path: Path
    label: int  # UNLABELLED when the row's class is unknown
    split: str
    problem: str | None = None  # why the row cannot be used (reported as a reject when sharding)


@dataclass(frozen=True)
class Source:
    root: Path
    records: list[VideoRecord]
    class_names: list[str]  # index = label id

    @property
    def label_map(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.class_names)}

    @property
    def splits(self) -> list[str]:
        return sorted({record.split for record in self.records})

    def split_records(self, split: str) -> list[VideoRecord]:
        return [record for record in self.records if record.split == split]


@dataclass(frozen=True)
class _Row:
    """One annotation row before labelling."""

    where: str  # file:line, file[index] or relative path: where to look when it is reported
    key: str
    path: Path  # the video, or the annotation file when the row itself is malformed
    class_name: str
    split: str
    problem: str | None = None


def _is_video(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in VIDEO_EXTENSIONS


def _index_videos(root: Path) -> dict[str, Path]:
    """Video files under `root` by file stem (the first in sorted order wins on duplicates)."""
    index: dict[str, Path] = {}
    for path in sorted(root.rglob("*")):
        if _is_video(path):
            index.setdefault(path.stem, path)
    return index


def _class_order(names: Iterable[str]) -> list[str]:
    """Sorted class names; numerically when every name is an integer ("2" before "10")."""
    unique = set(names)
    if unique and all(name.isdigit() for name in unique):
        return sorted(unique, key=int)
    return sorted(unique)


def _labelled(
    root: Path,
    rows: list[_Row],
    classes: Sequence[str] | None = None,
    class_source: str = "the given classes",
) -> Source:
    """Records from rows: classes from `classes` (named `class_source` in messages) or, when None,
    from the usable rows; a row with an unknown class or an already listed key gets its problem."""
    class_names = (
        list(classes) if classes is not None else _class_order(r.class_name for r in rows if not r.problem)
    )
    label_map = {name: index for index, name in enumerate(class_names)}
    first_seen: dict[str, _Row] = {}
    records = []
    for row in rows:
        problem = row.problem
        if problem is None and row.class_name not in label_map:
            problem = f"unknown label: {row.class_name!r} ({row.where}) is not in {class_source}"
        if problem is None:
            first = first_seen.setdefault(row.key, row)
            if first is not row:
                problem = f"duplicate key: {row.key!r} ({row.where}) is already listed at {first.where}"
        label = label_map.get(row.class_name, UNLABELLED)
        records.append(VideoRecord(row.key, row.path, label, row.split, problem))
    return Source(root=root, records=records, class_names=class_names)


def read_folder(root: Path, classes: Sequence[str] | None = None) -> Source:
    class_layout = any(_is_video(f) for d in root.iterdir() if d.is_dir() for f in d.iterdir())
    split_dirs = (
        [(root, "train")] if class_layout else [(d, d.name) for d in sorted(root.iterdir()) if d.is_dir()]
    )
    rows = []
    for split_dir, split in split_dirs:
        for class_dir in sorted(d for d in split_dir.iterdir() if d.is_dir()):
            for video in sorted(f for f in class_dir.iterdir() if _is_video(f)):
                relative = video.relative_to(root)
                rows.append(
                    _Row(
                        relative.as_posix(), relative.with_suffix("").as_posix(), video, class_dir.name, split
                    )
                )
    return _labelled(root, rows, classes)


def read_csv(path: Path, video_root: Path, classes: Sequence[str] | None = None) -> Source:
    rows = []
    for where, fields, problem in read_csv_rows(path, {"path", "label"}):
        split = fields.get("split") or "train"
        problem = problem or empty_field_problem(fields, ("path", "label"), where)
        if problem is not None:
            rows.append(_Row(where, where, path, fields["label"], split, problem))
            continue
        relative = Path(fields["path"])
        rows.append(
            _Row(where, relative.with_suffix("").as_posix(), video_root / relative, fields["label"], split)
        )
    return _labelled(video_root, rows, classes)


KINETICS_COLUMNS = ("label", "youtube_id", "time_start", "time_end", "split")


def _kinetics_row(
    file: Path,
    where: str,
    fields: dict[str, str],
    problem: str | None,
    index: dict[str, Path],
    video_root: Path,
) -> _Row:
    """The row of the video `<youtube_id>_<start:06d>_<end:06d>` (found by that stem or by the id)."""
    problem = problem or empty_field_problem(fields, KINETICS_COLUMNS[1:], where)
    if problem is None:
        try:
            start, end = int(float(fields["time_start"])), int(float(fields["time_end"]))
        except ValueError:
            times = f"{fields['time_start']!r}, {fields['time_end']!r}"
            problem = f"malformed row: {where} has times that are not numbers ({times})"
    if problem is not None:
        return _Row(where, where, file, fields["label"], fields["split"] or "train", problem)
    stem = f"{fields['youtube_id']}_{start:06d}_{end:06d}"
    video = index.get(stem) or index.get(fields["youtube_id"]) or video_root / f"{stem}.mp4"
    return _Row(where, stem, video, fields["label"], fields["split"])


def read_kinetics(path: Path, video_root: Path, classes: Sequence[str] | None = None) -> Source:
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
    index = _index_videos(video_root)
    rows = []
    for file in files:
        for where, fields, problem in read_csv_rows(file, set(KINETICS_COLUMNS)):
            if fields["label"] or problem:  # unlabelled test rows cannot be trained or evaluated on
                rows.append(_kinetics_row(file, where, fields, problem, index, video_root))
    return _labelled(video_root, rows, classes)


def _ssv2_classes(labels_file: Path) -> list[str]:
    """Templates ordered by their id in the label file (`{"<template>": "<id>", ...}`)."""
    labels = read_json(labels_file, dict)
    try:
        ids = {name: int(value) for name, value in labels.items()}
    except (TypeError, ValueError) as err:
        raise AnnotationError(f"{labels_file}: every class id must be an integer ({err})") from err
    if len(set(ids.values())) != len(ids):
        raise AnnotationError(f"{labels_file}: class ids are not distinct")
    return sorted(ids, key=ids.__getitem__)


def _ssv2_row(
    entry: Any, list_file: Path, where: str, split: str, index: dict[str, Path], video_root: Path
) -> _Row:
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("id"), str)
        and isinstance(entry.get("template"), str)
    ):
        problem = f"malformed row: {where} is not an object with string 'id' and 'template'"
        return _Row(where, where, list_file, "", split, problem)
    name = entry["template"].replace("[", "").replace("]", "")
    video = index.get(entry["id"]) or video_root / f"{entry['id']}.webm"
    return _Row(where, entry["id"], video, name, split)


def read_ssv2(path: Path, video_root: Path) -> Source:
    folder = path if path.is_dir() else path.parent
    labels_file = next(iter(sorted(folder.glob("*labels.json"))), None)
    if labels_file is None:
        raise AnnotationError(f"{folder}: no *labels.json (the Something-Something-v2 label file)")
    classes = _ssv2_classes(labels_file)
    index = _index_videos(video_root)
    rows = [
        _ssv2_row(entry, list_file, f"{list_file.name}[{position}]", split, index, video_root)
        for split in ("train", "validation")
        for list_file in sorted(folder.glob(f"*{split}.json"))
        for position, entry in enumerate(read_json(list_file, list))
    ]
    return _labelled(video_root, rows, classes, labels_file.name)


def read_source(
    path: Path,
    format: DatasetFormat,
    *,
    video_root: Path | None = None,
    classes: Sequence[str] | None = None,
) -> Source:
    """Read a dataset; `video_root` (default: the dataset folder or the annotation file's folder)
    is where the annotation formats look for video files. `classes` is the label set (label id =
    position); rows of other classes become "unknown label" rejects. By default the classes are
    those the annotations name; for ssv2 always those of the label file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such dataset")
    if format == "ssv2" and classes is not None:
        raise ValueError("ssv2 takes its classes from its *labels.json; do not pass classes")
    if format == "folder":
        return read_folder(path, classes)
    root = Path(video_root) if video_root is not None else (path if path.is_dir() else path.parent)
    if format == "csv":
        return read_csv(path, root, classes)
    if format == "kinetics":
        return read_kinetics(path, root, classes)
    return read_ssv2(path, root)
