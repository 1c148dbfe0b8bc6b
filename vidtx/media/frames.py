"""Reading a frames-store sample: JPEG frames packed in one member (written by `vidtx.media.jpeg`).

Only the sampled frames are decoded, with libjpeg-turbo's DCT scaling (through simplejpeg): a frame
is decoded directly at the smallest of its k/8 scales that is at least the size asked for, instead
of at full size and resized afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor, Future
from typing import Protocol

import numpy as np
import simplejpeg
import torch

from vidtx.media.decode import VideoDecodeError
from vidtx.media.resize import resize_frames


class ByteRanges(Protocol):
    """Where a frames member's bytes are when they were not read into memory (a tar member on disk)."""

    size: int

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]: ...


class JpegFrames:
    """The `Video` of a frames-store sample, whose JPEGs are `data` (in memory, or ranges of a file
    that only the sampled frames are read from). `size` (width, height): frames come out at exactly
    that size, or, with `at_least`, at the first DCT scale that covers it (no resize: right for a
    random crop that is resized anyway). None: the stored size."""

    def __init__(
        self,
        data: bytes | ByteRanges,
        offsets: Sequence[int],
        fps: float,
        *,
        size: tuple[int, int] | None = None,
        at_least: bool = False,
    ) -> None:
        stored = len(data) if isinstance(data, bytes) else data.size
        if len(offsets) < 2 or offsets[-1] != stored:
            raise VideoDecodeError(f"frame index does not match the frames member ({stored} bytes)")
        self._data, self._offsets, self._size, self._at_least = data, offsets, size, at_least
        self.num_frames, self.fps = len(offsets) - 1, fps
        self._ahead: tuple[list[tuple[int, int]], Future[list[bytes]]] | None = None

    def _ranges(self, indices: Sequence[int]) -> list[tuple[int, int]]:
        return [(self._offsets[i], self._offsets[i + 1]) for i in indices]

    def read_ahead(self, indices: Sequence[int], pool: Executor) -> None:
        """Start reading the JPEGs of the distinct, sorted `indices` in `pool`, where the member is
        not in memory; `frames` of the same indices then waits for that read instead of making it."""
        if not isinstance(self._data, bytes):
            ranges = self._ranges([int(i) for i in indices])
            self._ahead = (ranges, pool.submit(self._data.read_ranges, ranges))

    def _jpegs(self, indices: Sequence[int]) -> list[bytes | memoryview]:
        ranges = self._ranges(indices)
        if isinstance(self._data, bytes):
            view = memoryview(self._data)
            return [view[start:end] for start, end in ranges]
        if self._ahead is not None and self._ahead[0] == ranges:
            return list(self._ahead[1].result())
        return list(self._data.read_ranges(ranges))

    def _decode(self, index: int, jpeg: bytes | memoryview, out: np.ndarray | None = None) -> np.ndarray:
        width, height = self._size or (0, 0)
        try:
            return simplejpeg.decode_jpeg(
                jpeg, colorspace="RGB", min_width=width, min_height=height, buffer=out
            )
        except ValueError as err:
            raise VideoDecodeError(f"frame {index} is not a readable JPEG ({err})") from err

    def frames(self, indices: Sequence[int]) -> np.ndarray:
        """RGB frames at `indices` (repeats allowed), uint8 (T, H, W, 3). Each distinct frame is read
        and decoded once, straight into the output."""
        indices = [int(i) for i in indices]
        if any(not 0 <= i < self.num_frames for i in indices):
            raise VideoDecodeError(f"frame indices {indices[:3]}... outside 0..{self.num_frames - 1}")
        distinct = list(dict.fromkeys(indices))
        jpegs = dict(zip(distinct, self._jpegs(distinct), strict=True))
        first = self._decode(distinct[0], jpegs[distinct[0]])
        out = np.empty((len(indices), *first.shape), dtype=np.uint8)  # (T, h, w, 3)
        slot_of: dict[int, int] = {}
        for slot, index in enumerate(indices):
            if index in slot_of:
                out[slot] = out[slot_of[index]]
            elif index == distinct[0]:
                out[slot] = first
            else:
                self._decode(index, jpegs[index], out[slot])
            slot_of.setdefault(index, slot)
        if self._size is not None and not self._at_least:
            return resize_frames(torch.from_numpy(out), self._size[1], self._size[0]).numpy()
        return out
