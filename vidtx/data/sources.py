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

The video root defaults to the annotation file's folder. A video that is listed but missing keeps
its expected path; the sharding job rejects it with the reason "missing".
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vidtx.config import DatasetFormat

VIDEO_EXTENSIONS = (".mp4", ".webm", ".mkv", ".avi", ".mov", ".m4v")


@dataclass(frozen=True)
class VideoRecord:
    key: str  # unique within the dataset: relative path without suffix, YouTube id + times, SSv2 id
    path: Path
    label: int
    split: str


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


def _labelled(root: Path, rows: list[tuple[str, Path, str, str]], classes: list[str] | None = None) -> Source:
    """Build a Source from (key, path, class name, split) rows."""
    class_names = classes if classes is not None else _class_order(row[2] for row in rows)
    label_map = {name: index for index, name in enumerate(class_names)}
    records = [VideoRecord(key, path, label_map[name], split) for key, path, name, split in rows]
    return Source(root=root, records=records, class_names=class_names)


def _read_csv(path: Path, required: set[str]) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        reader = csv.DictReader(file)
        missing = required - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: missing column(s) {sorted(missing)}; found {reader.fieldnames}")
        return [{name: (value or "").strip() for name, value in row.items()} for row in reader]


def read_folder(root: Path) -> Source:
    class_layout = any(_is_video(f) for d in root.iterdir() if d.is_dir() for f in d.iterdir())
    split_dirs = (
        [(root, "train")] if class_layout else [(d, d.name) for d in sorted(root.iterdir()) if d.is_dir()]
    )
    rows = []
    for split_dir, split in split_dirs:
        for class_dir in sorted(d for d in split_dir.iterdir() if d.is_dir()):
            for video in sorted(f for f in class_dir.iterdir() if _is_video(f)):
                key = video.relative_to(root).with_suffix("").as_posix()
                rows.append((key, video, class_dir.name, split))
    return _labelled(root, rows)


def read_csv(path: Path, video_root: Path) -> Source:
    rows = []
    for row in _read_csv(path, {"path", "label"}):
        relative = Path(row["path"])
        rows.append(
            (
                relative.with_suffix("").as_posix(),
                video_root / relative,
                row["label"],
                row.get("split") or "train",
            )
        )
    return _labelled(video_root, rows)


def read_kinetics(path: Path, video_root: Path) -> Source:
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
    index = _index_videos(video_root)
    rows = []
    for file in files:
        for row in _read_csv(file, {"label", "youtube_id", "time_start", "time_end", "split"}):
            if not row["label"]:
                continue  # unlabelled test rows cannot be trained or evaluated on
            stem = (
                f"{row['youtube_id']}_{int(float(row['time_start'])):06d}_{int(float(row['time_end'])):06d}"
            )
            video = index.get(stem) or index.get(row["youtube_id"]) or video_root / f"{stem}.mp4"
            rows.append((stem, video, row["label"], row["split"]))
    return _labelled(video_root, rows)


def read_ssv2(path: Path, video_root: Path) -> Source:
    folder = path if path.is_dir() else path.parent
    labels_file = next(iter(sorted(folder.glob("*labels.json"))), None)
    if labels_file is None:
        raise ValueError(f"{folder}: no *labels.json (the Something-Something-v2 label file)")
    labels: dict[str, str] = json.loads(labels_file.read_text())
    classes = sorted(labels, key=lambda name: int(labels[name]))
    index = _index_videos(video_root)
    rows = []
    for split in ("train", "validation"):
        for list_file in sorted(folder.glob(f"*{split}.json")):
            for entry in json.loads(list_file.read_text()):
                name = entry["template"].replace("[", "").replace("]", "")
                video = index.get(entry["id"]) or video_root / f"{entry['id']}.webm"
                rows.append((entry["id"], video, name, split))
    return _labelled(video_root, rows, classes)


def read_source(path: Path, format: DatasetFormat, *, video_root: Path | None = None) -> Source:
    """Read a dataset; `video_root` (default: the dataset folder or the annotation file's folder)
    is where the annotation formats look for video files."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such dataset")
    if format == "folder":
        return read_folder(path)
    root = Path(video_root) if video_root is not None else (path if path.is_dir() else path.parent)
    if format == "csv":
        return read_csv(path, root)
    if format == "kinetics":
        return read_kinetics(path, root)
    return read_ssv2(path, root)
