"""What is at a location, local or in a bucket, without reading it: existence, kind, size and
modification time (of one file, or of many with one listing per folder), the names in a folder, every
object under a bucket prefix."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyarrow import fs

from vidtx.locations import Location
from vidtx.storage.client import StorageError, describe, file_info, filesystem
from vidtx.storage.paths import bucket_of, is_remote, parent_of

FileState = tuple[int, int]  # (size, modification time in ns)


def exists(where: Location) -> bool:
    if not is_remote(where):
        return Path(where).exists()
    return file_info(where).type != fs.FileType.NotFound


def is_file(where: Location) -> bool:
    if not is_remote(where):
        return Path(where).is_file()
    return file_info(where).type == fs.FileType.File


def size(where: Location) -> int | None:
    """The size of the file at `where`, None when there is none."""
    if not is_remote(where):
        try:
            return Path(where).stat().st_size
        except OSError:
            return None
    info = file_info(where)
    return info.size if info.type == fs.FileType.File else None


def file_state(where: Location) -> FileState | None:
    """The (size, modification time in ns) of the file at `where`, None when there is none: one request
    in a bucket (`file_states` lists whole folders, for many files)."""
    if not is_remote(where):
        return _local_state(Path(where))
    info = file_info(where)
    return (info.size, info.mtime_ns) if info.type == fs.FileType.File else None


def names(folder: Location, suffix: str = "") -> list[str]:
    """The names of the files directly in `folder` that end with `suffix`, sorted."""
    if not is_remote(folder):
        return sorted(p.name for p in Path(folder).glob(f"*{suffix}") if p.is_file())
    client, path = filesystem(folder)
    try:
        infos = client.get_file_info(fs.FileSelector(path, allow_not_found=True))
    except OSError as err:
        raise StorageError(describe(folder, err)) from None
    return sorted(i.base_name for i in infos if i.type == fs.FileType.File and i.base_name.endswith(suffix))


def walk(folder: Location) -> list[str]:
    """The path relative to `folder` ('cat/a.mp4') of every object under a bucket prefix, sorted:
    one listing (S3 returns 1,000 keys a request)."""
    client, path = filesystem(folder)
    try:
        infos = client.get_file_info(fs.FileSelector(path, recursive=True, allow_not_found=True))
    except OSError as err:
        raise StorageError(describe(folder, err)) from None
    return sorted(info.path[len(path) + 1 :] for info in infos if info.type == fs.FileType.File)


def file_states(files: Sequence[Location]) -> list[FileState | None]:
    """The (size, modification time in ns) of each file, None where there is none: what make and
    rsync compare to decide that a file changed, without reading it. In a bucket, one listing per
    folder that holds some of the files, not one request per file."""
    listed: dict[str, FileState] = {}
    for folder in dict.fromkeys(parent_of(file) for file in files if is_remote(file)):
        client, path = filesystem(folder)
        try:
            infos = client.get_file_info(fs.FileSelector(path, allow_not_found=True))
        except OSError as err:
            raise StorageError(describe(folder, err)) from None
        scheme, _ = bucket_of(str(folder))
        listed |= {f"{scheme}://{i.path}": (i.size, i.mtime_ns) for i in infos if i.type == fs.FileType.File}
    return [listed.get(str(file)) if is_remote(file) else _local_state(Path(file)) for file in files]


def _local_state(file: Path) -> FileState | None:
    try:
        status = file.stat()
    except OSError:
        return None
    return status.st_size, status.st_mtime_ns


def is_folder(where: Location) -> bool:
    """A folder here; in a bucket, a location that is no object (a prefix, perhaps of nothing yet)."""
    return not is_file(where) if is_remote(where) else Path(where).is_dir()


def blocking_file(where: Location) -> Path | None:
    """The file that keeps `where` from becoming a folder here (it, or a folder above it, is a file);
    None when nothing does, as in a bucket."""
    if is_remote(where):
        return None
    existing = next(path for path in [Path(where), *Path(where).absolute().parents] if path.exists())
    return None if existing.is_dir() else existing
