"""The file systems Ray Train keeps a run on (its snapshot, `checkpoint_manager_snapshot.json`, the
checkpoints a resumed run starts from, and the checkpoints' files): vidtx's own, on disk as in a bucket.

- On disk, every file written appears whole or not at all. Ray writes through a pyarrow file
  system's `open_output_stream`; pyarrow's `LocalFileSystem` truncates the file first and writes it
  after: a run killed in between left an empty snapshot, and the run, started again, failed at once
  with Ray's `CheckpointManagerInitializationError` (JSONDecodeError) instead of resuming. Here each
  file is written beside its place under a temporary name (`vidtx.files`) and renamed there when the
  stream is closed.
- In a bucket (an upload is whole by itself), the requests are vidtx's client's
  (`vidtx.storage.client`), retried as it retries them. Ray sends the file system to its controller
  and workers by pickle, and pyarrow's S3 file system pickles without its retry strategy: Ray's own
  client, or vidtx's sent as it is, tried a request 3 times, and a training whose S3 gateway stopped
  for 20 s failed on its snapshot's upload. This one is rebuilt where it lands, from the endpoint and
  region (never credentials: each process reads its own from its environment).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import fs

from vidtx.files import temporary_path
from vidtx.locations import Location
from vidtx.storage.client import bucket_filesystem, bucket_path, endpoint
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


class _Delegated(fs.FileSystemHandler):
    """Every operation is `target`'s own; subclasses change some, and say how they are pickled."""

    target: fs.FileSystem

    def get_type_name(self) -> str:
        return f"vidtx-{type(self).__name__}"

    def equals(self, other: Any) -> bool:
        return type(other) is type(self) and other.__reduce__() == self.__reduce__()

    def open_output_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        return self.target.open_output_stream(path, metadata=metadata)

    def normalize_path(self, path: str) -> str:
        return self.target.normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list[fs.FileInfo]:
        return self.target.get_file_info(paths)

    def get_file_info_selector(self, selector: fs.FileSelector) -> list[fs.FileInfo]:
        return self.target.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.target.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.target.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.target.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("vidtx never deletes the contents of the root folder")

    def delete_file(self, path: str) -> None:
        self.target.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.target.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.target.copy_file(src, dest)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.target.open_input_stream(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.target.open_input_file(path)

    def open_append_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        return self.target.open_append_stream(path, metadata=metadata)


class WholeFiles(_Delegated):
    """pyarrow's `LocalFileSystem`, but `open_output_stream` writes a file whole (module docstring)."""

    target = fs.LocalFileSystem()

    def __reduce__(self) -> tuple[type, tuple[()]]:  # sent to Ray's controller and workers
        return WholeFiles, ()

    def open_output_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        Path(path).parent.mkdir(parents=True, exist_ok=True)  # as the local file system's own does
        return pa.PythonFile(_RenamedOnClose(path), mode="w")


class ClientBucket(_Delegated):
    """A bucket through vidtx's storage client, with its retries wherever it is unpickled."""

    def __init__(self, scheme: str, endpoint_url: str | None, region: str | None) -> None:
        self.scheme, self.endpoint_url, self.region = scheme, endpoint_url, region

    def __reduce__(self) -> tuple[type, tuple[str, str | None, str | None]]:
        return ClientBucket, (self.scheme, self.endpoint_url, self.region)

    @functools.cached_property
    def target(self) -> fs.FileSystem:  # type: ignore[override]
        return bucket_filesystem(self.scheme, self.endpoint_url, self.region)


def run_storage(where: Location) -> tuple[fs.FileSystem, str]:
    """Ray's `storage_filesystem` for a run kept at `where` (a folder or a bucket's URL), and
    `where` as a path within it (`RunConfig.storage_path`)."""
    if not is_remote(where):
        return fs.PyFileSystem(WholeFiles()), str(Path(where).absolute())
    scheme, path = bucket_path(where)
    bucket = ClientBucket(scheme, endpoint(), os.environ.get("AWS_DEFAULT_REGION"))
    return fs.PyFileSystem(bucket), path
