"""An object in a bucket read as a file that seeks: by ranged GETs of `RANGE_CHUNK`, as its reader asks.

A long video in a bucket is demuxed front to back, then read a few groups of pictures at a time
(`vidtx.media.segments`): read this way its length costs no memory, where reading it whole cost the
whole object (an hour of 1080p is gigabytes).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pyarrow import fs

from vidtx.locations import Location
from vidtx.storage.client import StorageError, describe, filesystem
from vidtx.storage.objects import no_such_object, read_bytes
from vidtx.storage.paths import local_path

# Bytes per ranged GET: a demux reads front to back, and a segment's remux reads the container's
# index and a few hundred KiB of packets; 1 MiB keeps both to few requests without reading far past
# what a segment needs.
RANGE_CHUNK = 1 << 20
# An object no larger is read whole in one GET when opened: its reader's seeks (to the index at the
# end, back to the packets) each cost a chunk, which read a 1.3 MB video 5x over.
WHOLE_BELOW = 4 * RANGE_CHUNK


class _Ranges(io.RawIOBase):
    """pyarrow's random-access file of an object (each read one ranged GET) as a raw stream, which
    `io.BufferedReader` reads in chunks of `RANGE_CHUNK`, errors named by the object."""

    def __init__(self, file: fs.NativeFile, where: str) -> None:
        self._file, self._where = file, where

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        try:
            data = self._file.read(len(buffer))
        except OSError as err:
            raise StorageError(describe(self._where, err)) from None
        buffer[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        """The rest of the object, in one request (`RawIOBase`'s would read 8 KiB a request)."""
        try:
            return self._file.read()
        except OSError as err:
            raise StorageError(describe(self._where, err)) from None

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()
        super().close()


@dataclass(frozen=True)
class ObjectFile:
    """An object in a bucket with the reading side of `Path`: `open("rb")` gives a file object that
    seeks and reads by ranges (a HEAD request to open it; one below `WHOLE_BELOW` bytes is read
    whole), `read_bytes` the whole object."""

    where: str

    def open(self, mode: str = "rb") -> BinaryIO:
        if mode != "rb":
            raise ValueError(
                f"{self.where}: an object in a bucket opens for reading only ('rb'), not {mode!r}"
            )
        client, path = filesystem(self.where)
        try:
            file = client.open_input_file(path)
        except FileNotFoundError:
            raise no_such_object(self.where) from None
        except OSError as err:
            raise StorageError(describe(self.where, err)) from None
        ranges = _Ranges(file, self.where)
        if file.size() <= WHOLE_BELOW:
            with ranges:
                return io.BytesIO(ranges.readall())
        return io.BufferedReader(ranges, buffer_size=RANGE_CHUNK)  # type: ignore[return-value]

    def read_bytes(self) -> bytes:
        return read_bytes(self.where)

    def __str__(self) -> str:
        return self.where


def readable_file(where: Location) -> Path | ObjectFile:
    """`where` to read as a file that seeks: its path on this machine, or its object read by ranges."""
    return local_path(where) or ObjectFile(str(where))
