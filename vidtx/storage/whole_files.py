"""A local file system on which every file written appears whole or not at all.

Ray Train writes its run's snapshot (`checkpoint_manager_snapshot.json`, the list of checkpoints a
resumed run starts from) and the files of each checkpoint through a pyarrow file system's
`open_output_stream`. On pyarrow's `LocalFileSystem` that truncates the file first and writes it
after: a run killed in between left an empty snapshot, and the run, started again, failed at once
with Ray's `CheckpointManagerInitializationError` (JSONDecodeError) instead of resuming. An object
store's upload is whole by itself; on local (or shared) disk this file system writes each file
beside its place under a temporary name (`vidtx.files`) and renames it there when the stream is closed, so a
reader, or a run started again after a kill, sees the earlier file or the new one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import fs

from vidtx.files import temporary_path
from vidtx.locations import Location
from vidtx.storage.paths import is_remote


class _RenamedOnClose:
    """A binary file written under a temporary name, renamed to `path` when closed."""

    def __init__(self, path: str) -> None:
        self.path, self.partial = path, temporary_path(Path(path))
        self.file = open(self.partial, "wb")  # noqa: SIM115 (closed by close())

    @property
    def closed(self) -> bool:
        return self.file.closed

    def write(self, data: Any) -> int:
        return self.file.write(data)

    def tell(self) -> int:
        return self.file.tell()

    def flush(self) -> None:
        self.file.flush()

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        if self.file.closed:
            return
        self.file.close()
        os.replace(self.partial, self.path)


class WholeFiles(fs.FileSystemHandler):
    """pyarrow's `LocalFileSystem`, but `open_output_stream` writes a file whole (see the module
    docstring); everything else is the local file system's own."""

    def __init__(self) -> None:
        self.local = fs.LocalFileSystem()

    def __reduce__(self) -> tuple[type, tuple[()]]:  # sent to Ray's controller and workers
        return WholeFiles, ()

    def open_output_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # as the local file system's own does
        return pa.PythonFile(_RenamedOnClose(path), mode="w")

    def get_type_name(self) -> str:
        return "vidtx-whole-files"

    def equals(self, other: Any) -> bool:
        return isinstance(other, WholeFiles)

    def normalize_path(self, path: str) -> str:
        return self.local.normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list[fs.FileInfo]:
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector: fs.FileSelector) -> list[fs.FileInfo]:
        return self.local.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.local.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("vidtx never deletes the contents of the root folder")

    def delete_file(self, path: str) -> None:
        self.local.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.local.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.local.copy_file(src, dest)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.local.open_input_stream(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.local.open_input_file(path)

    def open_append_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        return self.local.open_append_stream(path, metadata=metadata)


def run_filesystem(where: Location) -> fs.FileSystem | None:
    """The file system Ray Train keeps a run on at `where`: on disk, one whose written files appear
    whole (`WholeFiles`); None in a bucket, whose uploads are (Ray picks its client from the URL)."""
    return None if is_remote(where) else fs.PyFileSystem(WholeFiles())
