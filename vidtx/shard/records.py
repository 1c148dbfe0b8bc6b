"""The records every dataset format is read into, and the rules they share: labelling, unique keys,
split names, and paths that must stay inside the video root.

A split name becomes file names (`<split>-NNNNNN.tar`, `<split>.manifest.json`): one that cannot
(`../../x`, `a/b`, `{a,b}`) fails the job with `AnnotationError` naming the row or folder, before
anything is written. It is not a row reject: such a row has no split whose rejects could list it,
and the value is usually the same in many rows (a path in the split column), which rejects would
hide as a split that silently went missing. (Hugging Face `datasets` refuses such split names too,
where a split becomes a file name.)

A bad row keeps its place as a record with a `problem` (reported as a reject when sharding); a file
that is not a video of the dataset is an `Ignored` entry with its reason. Nothing is dropped silently.

Labels: a row names a tuple of labels. A single-label source's rows name one each; a multi-label
source (`Source.multi_label`: read with `shard.label_separator`, or a json list whose rows give a
list) names a set per row (stripped, duplicates dropped, in written order), and its records carry
every label id in `labels` (`label` is the first). A row whose set is empty ("", "|", []) is an
"empty label list" reject; one naming a label outside the label set an "unknown label" reject.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from vidtx.locations import Location
from vidtx.manifest import check_split
from vidtx.shard.annotations import AnnotationError
from vidtx.storage import join, parent_of

UNLABELLED = -1  # the label of a record whose row names no known class


@dataclass(frozen=True)
class VideoRecord:
    key: str  # unique within the dataset: relative path without suffix, YouTube id + times, SSv2 id
    path: Location
    label: int  # UNLABELLED when the row's class is unknown; a multi-label row's first label
    split: str
    problem: str | None = None  # why the row cannot be used (reported as a reject when sharding)
    labels: tuple[int, ...] | None = None  # a multi-label source's row: every label id; None: single-label


@dataclass(frozen=True)
class Ignored:
    """A file (or folder) under the dataset that is not read as a video, and why."""

    path: Location
    reason: str


@dataclass(frozen=True)
class Source:
    root: Location
    records: list[VideoRecord]
    class_names: list[str]  # index = label id
    ignored: list[Ignored] = field(default_factory=list)
    multi_label: bool = False  # rows name label sets: records carry `labels`

    @property
    def label_map(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.class_names)}

    @property
    def splits(self) -> list[str]:
        return sorted({record.split for record in self.records})

    def split_records(self, split: str) -> list[VideoRecord]:
        return [record for record in self.records if record.split == split]


@dataclass(frozen=True)
class Row:
    """One annotation row (or listed video) before labelling."""

    where: str  # file:line, file[index] or relative path: where to look when it is reported
    key: str
    path: Location  # the video, or the annotation file when the row itself is malformed
    label_names: tuple[str, ...]  # one name (single-label sources), or the row's label set
    split: str
    problem: str | None = None


def normalise_split(name: str) -> str:
    """'Train ' and 'train' are one split."""
    return name.strip().lower()


def split_name(written: str, where: str) -> str:
    """The split a row (or split folder) at `where` names, normalised; AnnotationError when it cannot
    name files."""
    try:
        return check_split(normalise_split(written))
    except ValueError as err:
        raise AnnotationError(f"{where}: {err}") from None


def beside(file: Location, where: str) -> str:
    """The name of a row's place (`file:line`) beside its file, for messages."""
    return str(join(parent_of(file), where))


def outside_root_problem(written: str, video_root: Location, where: str) -> str:
    return f"outside the video root: {written!r} ({where}) is not inside {video_root}"


def split_labels(written: str, separator: str | None) -> tuple[str, ...]:
    """The label names of a label field: split on `separator` (None: the whole field is one name),
    stripped, empty ones and repeats dropped, in written order."""
    names = written.split(separator) if separator is not None else [written]
    return tuple(dict.fromkeys(name.strip() for name in names if name.strip()))


def empty_labels_problem(written: object, where: str) -> str:
    return f"empty label list ({where}: {written!r})"


def unique_keys(paths: Sequence[PurePath]) -> list[str]:
    """Keys of relative video paths: the path without its suffix ('cat/a'), so that keys stay the same
    when a video is re-encoded to another container; with the suffix ('cat/a.mp4', 'cat/a.webm')
    only for paths whose stems collide, which would otherwise be one key for two videos."""
    stems = [path.with_suffix("").as_posix() for path in paths]
    distinct = Counter(stem for stem, _ in dict.fromkeys(zip(stems, paths, strict=True)))
    return [path.as_posix() if distinct[stem] > 1 else stem for stem, path in zip(stems, paths, strict=True)]


def class_order(names: Iterable[str]) -> list[str]:
    """Sorted class names; numerically when every name is an integer ("2" before "10")."""
    unique = set(names)
    if unique and all(name.isdigit() for name in unique):
        return sorted(unique, key=int)
    return sorted(unique)


def labelled(
    root: Location,
    rows: list[Row],
    classes: Sequence[str] | None = None,
    class_source: str = "the given classes",
    ignored: Sequence[Ignored] = (),
    multi_label: bool = False,
) -> Source:
    """Records from rows: classes from `classes` (named `class_source` in messages) or, when None,
    from the usable rows; a row with an unknown class or an already listed key gets its problem. With
    `multi_label`, records carry every label id of their row (`VideoRecord.labels`)."""
    class_names = (
        list(classes)
        if classes is not None
        else class_order(name for row in rows if not row.problem for name in row.label_names)
    )
    label_map = {name: index for index, name in enumerate(class_names)}
    first_seen: dict[str, Row] = {}
    records = []
    for row in rows:
        problem = row.problem
        unknown = next((name for name in row.label_names if name not in label_map), None)
        if problem is None and unknown is not None:
            problem = f"unknown label: {unknown!r} ({row.where}) is not in {class_source}"
        if problem is None:
            first = first_seen.setdefault(row.key, row)
            if first is not row:
                problem = f"duplicate key: {row.key!r} ({row.where}) is already listed at {first.where}"
        labels = tuple(label_map.get(name, UNLABELLED) for name in row.label_names)
        label = labels[0] if labels else UNLABELLED
        records.append(
            VideoRecord(row.key, row.path, label, row.split, problem, labels if multi_label else None)
        )
    return Source(
        root=root, records=records, class_names=class_names, ignored=list(ignored), multi_label=multi_label
    )
