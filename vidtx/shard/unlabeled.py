"""The unlabeled format (`shard.format: unlabeled`): videos without labels, the data of self-supervised
pretraining (`vidtx pretrain`).

The source is a folder, every video under it at any depth (`<split>/...` when each top-level folder
holding videos is named like a split, else all of it is "train"), or a CSV list with a `path` column
(and an optional `split` column). Keys are the relative paths without their suffix, as in the other
formats. Records carry no label and the manifest's class list is empty: training and evaluation
refuse such a split in one line; pretraining reads it. As everywhere, nothing under the folder is
dropped silently: a file that is not a video is ignored with its reason.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from vidtx import storage
from vidtx.locations import Location
from vidtx.shard.annotations import empty_field_problem, read_csv_rows
from vidtx.shard.folder import KNOWN_SPLITS, walk
from vidtx.shard.records import (
    UNLABELLED,
    Ignored,
    Source,
    VideoRecord,
    normalise_split,
    outside_root_problem,
    split_name,
    unique_keys,
)

_PROBLEMS = {"folder": "unreadable: a folder named like a video", "broken": "missing: broken symlink"}


def read_unlabeled(path: Location, video_root: Location, is_folder: bool) -> Source:
    """The videos of an unlabeled folder or CSV list (see the module docstring)."""
    return _read_folder(path) if is_folder else _read_list(path, video_root)


def _read_folder(root: Location) -> Source:
    files, ignored = walk(root)
    videos = [file for file in files if file.is_video]
    ignored += [Ignored(file.path, "not a video file") for file in files if not file.is_video]
    tops = {file.parts[0] for file in videos if len(file.parts) > 1}
    by_split = bool(tops) and all(normalise_split(top) in KNOWN_SPLITS for top in tops)
    keys = unique_keys([PurePosixPath(*file.parts) for file in videos])
    records = []
    for file, key in zip(videos, keys, strict=True):
        in_split = by_split and len(file.parts) > 1
        split = split_name(file.parts[0], str(storage.join(root, file.parts[0]))) if in_split else "train"
        records.append(VideoRecord(key, file.path, UNLABELLED, split, _PROBLEMS.get(file.kind)))
    return Source(root=root, records=records, class_names=[], ignored=ignored)


def _read_list(path: Location, video_root: Location) -> Source:
    parsed = []  # (where, path relative to the video root, split, problem)
    for where, fields, problem in read_csv_rows(path, {"path"}):
        split = split_name(fields.get("split") or "train", where)
        problem = problem or empty_field_problem(fields, ("path",), where)
        relative = storage.inside(fields["path"], video_root) if problem is None else None
        if problem is None and relative is None:
            problem = outside_root_problem(fields["path"], video_root, where)
        parsed.append((where, relative, split, problem))
    keys = iter(unique_keys([relative for _, relative, _, problem in parsed if problem is None]))
    records = [
        VideoRecord(where, path, UNLABELLED, split, problem)
        if problem
        else VideoRecord(next(keys), storage.join(video_root, relative.as_posix()), UNLABELLED, split)
        for where, relative, split, problem in parsed
    ]
    return Source(root=video_root, records=records, class_names=[], ignored=[])
