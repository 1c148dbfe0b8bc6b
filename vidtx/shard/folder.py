"""The folder format: `ROOT/<split>/<class>/<video>` or, without splits, `ROOT/<class>/<video>`.

Every file under the root ends up as a record (sharded, or rejected with its reason) or as an
`Ignored` entry with its reason; nothing is skipped silently:

* the walk follows symlinked folders but not a symlink back to an enclosing folder (a loop); a
  folder it cannot list is ignored ("unreadable folder: ..."); a broken symlink named like a video is
  a record rejected as "missing";
* hidden files and folders (".thumbnails", ".DS_Store") are ignored and never become classes;
* in a bucket (`s3://`, `gs://`), the walk is one listing of the prefix: objects have no symlinks,
  special files or unreadable folders, and a hidden folder is reported once, as on disk;
* the layout is decided per top-level folder: it is a split folder when it holds class folders
  (sub-folders with videos) and either has a known split name ("train", "val", ...) or holds no
  videos itself. One split folder makes it the split layout. A video at another depth than the
  layout's (a stray `train/x.mp4`, a nested `cat/extra/y.mp4`) is ignored with its reason; it
  never switches the layout.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from vidtx import storage
from vidtx.locations import Location
from vidtx.manifest import VIDEO_EXTENSIONS
from vidtx.shard.records import (
    Ignored,
    Row,
    Source,
    labelled,
    normalise_split,
    split_name,
    unique_keys,
)
from vidtx.storage import join

KNOWN_SPLITS = frozenset({"train", "training", "val", "valid", "validation", "dev", "test", "testing"})


@dataclass(frozen=True)
class FoundFile:
    """A file the walk found (a folder only when it is named like a video)."""

    path: Location
    parts: tuple[str, ...]  # path relative to the root, by component
    kind: str  # "file", "folder" (named like a video), "broken" (a dangling symlink), "special"

    @property
    def is_video(self) -> bool:
        return Path(self.parts[-1]).suffix.lower() in VIDEO_EXTENSIONS


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def walk(root: Location) -> tuple[list[FoundFile], list[Ignored]]:
    """Every file under `root` (sorted by path), and what the walk itself leaves out, with why."""
    if (folder := storage.local_path(root)) is None:
        return _walk_bucket(str(root))
    found: list[FoundFile] = []
    ignored: list[Ignored] = []

    def visit(folder: Path, parts: tuple[str, ...], enclosing: frozenset[tuple[int, int]]) -> None:
        try:
            with os.scandir(folder) as entries:
                children = sorted(entries, key=lambda entry: entry.name)
        except PermissionError:
            ignored.append(Ignored(folder, "unreadable folder: permission denied"))
            return
        except OSError as err:
            ignored.append(Ignored(folder, f"unreadable folder: {err.strerror or err}"))
            return
        for child in children:
            path, here = folder / child.name, (*parts, child.name)
            if child.name.startswith("."):
                ignored.append(Ignored(path, "hidden"))
                continue
            try:
                is_dir, is_file = child.is_dir(), child.is_file()  # both follow symlinks
                identity = _identity(child.stat()) if is_dir else None
            except OSError as err:
                ignored.append(Ignored(path, f"unreadable: {err.strerror or err}"))
                continue
            if identity is None:
                kind = "file" if is_file else "special" if path.exists() else "broken"
                found.append(FoundFile(path, here, kind))
            elif identity in enclosing:
                ignored.append(Ignored(path, "symlink loop: leads back to an enclosing folder"))
            else:
                if Path(child.name).suffix.lower() in VIDEO_EXTENSIONS:
                    found.append(FoundFile(path, here, "folder"))
                visit(path, here, enclosing | {identity})

    visit(folder, (), frozenset({_identity(folder.stat())}))
    return found, ignored


def _walk_bucket(root: str) -> tuple[list[FoundFile], list[Ignored]]:
    found, hidden = [], {}
    for relative in storage.walk(root):
        parts = tuple(relative.split("/"))
        first_hidden = next((i for i, part in enumerate(parts) if part.startswith(".")), None)
        if first_hidden is None:
            found.append(FoundFile(join(root, relative), parts, "file"))
        else:
            where = join(root, *parts[: first_hidden + 1])
            hidden[where] = Ignored(where, "hidden")
    return found, list(hidden.values())


def _is_split_folder(name: str, files: Sequence[FoundFile]) -> bool:
    videos = [file for file in files if file.parts[0] == name and file.is_video]
    holds_classes = any(len(file.parts) == 3 for file in videos)
    holds_videos = any(len(file.parts) == 2 for file in videos)
    return holds_classes and (normalise_split(name) in KNOWN_SPLITS or not holds_videos)


def _not_a_video_reason(file: FoundFile) -> str | None:
    if file.kind == "special":
        return "not a regular file"
    if not file.is_video:
        suffix = Path(file.parts[-1]).suffix
        return f"not a video file ({suffix or 'no extension'})"
    return None


_PROBLEMS = {"folder": "unreadable: a folder named like a video", "broken": "missing: broken symlink"}


def read_folder(root: Location, classes: Sequence[str] | None = None) -> Source:
    files, ignored = walk(root)
    top_folders = {file.parts[0] for file in files if len(file.parts) > 1}
    split_layout = any(_is_split_folder(name, files) for name in top_folders)
    layout = "<split>/<class>/<video>" if split_layout else "<class>/<video>"
    depth = 3 if split_layout else 2
    listed = []
    for file in files:
        reason = _not_a_video_reason(file)
        if reason is None and len(file.parts) < depth:
            reason = f"stray video: not in a class folder (the layout is {layout})"
        elif reason is None and len(file.parts) > depth:
            reason = f"nested folder: only {layout} is read"
        if reason is None:
            listed.append(file)
        elif file.kind != "folder":  # a folder's own files are reported one by one
            ignored.append(Ignored(file.path, reason))
    keys = unique_keys([PurePosixPath(*file.parts) for file in listed])
    rows = [
        Row(
            "/".join(file.parts),
            key,
            file.path,
            (file.parts[-2],),
            split_name(file.parts[0], str(join(root, file.parts[0]))) if split_layout else "train",
            _PROBLEMS.get(file.kind),
        )
        for file, key in zip(listed, keys, strict=True)
    ]
    return labelled(root, rows, classes, ignored=ignored)
