"""A video as JPEG frames: the frames store's sample format, written and read with libjpeg-turbo.

A video's frames are packed into one tar member (the JPEG files back to back) with an index of byte
offsets in the sample's json: reading a sample is one member however many frames the video has, and
a clip decodes only its sampled frames. Decoding uses libjpeg-turbo's DCT scaling (through
simplejpeg): a frame is decoded directly at the smallest of its k/8 scales that is at least the size
asked for, instead of at full size and resized afterwards.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import av
import numpy as np
import simplejpeg
import torch

from vidtx.media.decode import VideoDecodeError
from vidtx.media.encode import resampled_frames
from vidtx.media.resize import resize_frames


def encode_jpeg(frame: np.ndarray, quality: int) -> bytes:
    """RGB uint8 (H, W, 3) -> JPEG bytes (4:2:0, libjpeg-turbo)."""
    return simplejpeg.encode_jpeg(frame, quality=quality, colorspace="RGB", colorsubsampling="420")


def pack_frames(jpegs: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """JPEGs -> (the JPEGs back to back, the byte offset of each and then the end)."""
    return b"".join(jpegs), np.cumsum([0, *map(len, jpegs)]).tolist()


@dataclass(frozen=True)
class PackedFrames:
    """A video converted for the frames store."""

    data: bytes  # the JPEGs back to back
    offsets: list[int]  # byte offset of each frame, then the end: frame i is data[offsets[i]:offsets[i+1]]
    fps: float
    width: int
    height: int


def video_to_frames(data: bytes, *, short_side: int, fps: float | None, quality: int) -> PackedFrames:
    """Decode a video (PyAV, single-threaded), resample it to `fps` with its short side at
    `short_side` (never upscaled) and encode every frame as JPEG. Raises VideoDecodeError."""
    try:
        with av.open(io.BytesIO(data)) as container:
            frames, rate = resampled_frames(container, short_side, fps)
            first = next(frames, None)
            if first is None:
                raise VideoDecodeError("undecodable: no frames")
            jpegs = [encode_jpeg(frame, quality) for frame in itertools.chain([first], frames)]
    except (av.FFmpegError, ValueError) as err:
        raise VideoDecodeError(f"undecodable: {err}") from err
    packed, offsets = pack_frames(jpegs)
    return PackedFrames(packed, offsets, rate, width=first.shape[1], height=first.shape[0])


class JpegFrames:
    """The `Video` of a frames-store sample. `size` (width, height): frames come out at exactly that
    size, or, with `at_least`, at the first DCT scale that covers it (no resize: right for a random
    crop that is resized anyway). None: the stored size."""

    def __init__(
        self,
        data: bytes,
        offsets: Sequence[int],
        fps: float,
        *,
        size: tuple[int, int] | None = None,
        at_least: bool = False,
    ) -> None:
        if len(offsets) < 2 or offsets[-1] != len(data):
            raise VideoDecodeError(f"frame index does not match the frames member ({len(data)} bytes)")
        self._data, self._offsets, self._size, self._at_least = memoryview(data), offsets, size, at_least
        self.num_frames, self.fps = len(offsets) - 1, fps

    def _decode(self, index: int, out: np.ndarray | None = None) -> np.ndarray:
        jpeg = self._data[self._offsets[index] : self._offsets[index + 1]]
        width, height = self._size or (0, 0)
        try:
            return simplejpeg.decode_jpeg(
                jpeg, colorspace="RGB", min_width=width, min_height=height, buffer=out
            )
        except ValueError as err:
            raise VideoDecodeError(f"frame {index} is not a readable JPEG ({err})") from err

    def frames(self, indices: Sequence[int]) -> np.ndarray:
        """RGB frames at `indices` (repeats allowed), uint8 (T, H, W, 3). Each distinct frame is
        decoded once, straight into the output."""
        indices = [int(i) for i in indices]
        if any(not 0 <= i < self.num_frames for i in indices):
            raise VideoDecodeError(f"frame indices {indices[:3]}... outside 0..{self.num_frames - 1}")
        first = self._decode(indices[0])
        out = np.empty((len(indices), *first.shape), dtype=np.uint8)  # (T, h, w, 3)
        out[0] = first
        position = {indices[0]: 0}
        for slot, index in enumerate(indices[1:], start=1):
            if index in position:
                out[slot] = out[position[index]]
            else:
                self._decode(index, out[slot])
                position[index] = slot
        if self._size is not None and not self._at_least:
            return resize_frames(torch.from_numpy(out), self._size[1], self._size[0]).numpy()
        return out
