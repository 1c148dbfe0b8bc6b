"""Video decoding behind one small interface: decord, PyAV as the fallback, from bytes in memory or a file.

decord is fast at random access but unmaintained since 2021, so the rest of vidtx only sees `Video`
(frame count, frame rate, `frames(indices)`). Readers are built per video inside the process that
decodes (never shared with DataLoader workers: decord deadlocks there). Resizing happens in the
decoder (FFmpeg's scaler), which is far cheaper than resizing full-size frames afterwards. A video in a
file (or an object in a bucket, `VideoObject`) is read as the decoder asks, never whole, and probing
(`vidtx.media.probe`) streams too, so opening a long video costs memory for its frame index only, not for its encoded
length (decord itself reads an object whole: it takes a file name or bytes).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Literal, Protocol

import av
import decord
import numpy as np

Backend = Literal["auto", "decord", "pyav"]


class VideoObject(Protocol):
    """A video read through the file objects it opens, which seek (an object in a bucket, read by
    ranges: `vidtx.storage.ObjectFile`), or whole."""

    def open(self, mode: str = "rb") -> BinaryIO: ...

    def read_bytes(self) -> bytes: ...


# encoded video in memory, or a file or an object read as a stream (never whole)
VideoSource = bytes | Path | VideoObject


class VideoDecodeError(RuntimeError):
    """A video could not be read; the message is a short reason fit for a rejects list or a log."""


class Video(Protocol):
    num_frames: int
    fps: float

    def frames(self, indices: Sequence[int]) -> np.ndarray:
        """RGB frames at `indices` (repeats allowed), uint8 of shape (T, H, W, 3)."""
        ...


@contextlib.contextmanager
def _file_of(source: VideoSource) -> Iterator[BinaryIO]:
    """A video as a file object: over its bytes in memory, or its file or object opened (read as asked)."""
    if isinstance(source, bytes):
        yield io.BytesIO(source)
    else:
        with source.open("rb") as file:
            yield file


class DecordVideo:
    """decord's `VideoReader` over bytes in memory or a file; `width`/`height` of -1 keep the source size."""

    def __init__(
        self, source: VideoSource, *, width: int = -1, height: int = -1, num_threads: int = 1
    ) -> None:
        # decord copies a file object whole; a file it reads by name. Absolute, so that FFmpeg never
        # takes the part of a name before a colon for a protocol ("http:clip.mp4").
        if isinstance(source, Path):
            uri: str | io.BytesIO = str(source.absolute())
        else:
            uri = io.BytesIO(source if isinstance(source, bytes) else source.read_bytes())
        try:
            self._reader = decord.VideoReader(
                uri, ctx=decord.cpu(0), width=width, height=height, num_threads=num_threads
            )
        except (decord.DECORDError, RuntimeError) as err:
            raise VideoDecodeError(f"decord cannot open the video ({err})") from err
        self.num_frames = len(self._reader)
        self.fps = float(self._reader.get_avg_fps())

    def frames(self, indices: Sequence[int]) -> np.ndarray:
        try:
            return self._reader.get_batch([int(i) for i in indices]).asnumpy()
        except (decord.DECORDError, RuntimeError, IndexError) as err:
            raise VideoDecodeError(f"decord cannot decode frames ({err})") from err


class PyAVVideo:
    """PyAV decoding from the start of the stream: slower for sparse access, reads what decord cannot."""

    def __init__(self, source: VideoSource, *, width: int = -1, height: int = -1) -> None:
        self._source = source
        self._size = (width, height) if width > 0 and height > 0 else None  # upright, as shown
        try:
            with _file_of(source) as file, av.open(file) as container:
                stream = container.streams.video[0]
                rate = stream.average_rate or stream.guessed_rate
                self.fps = float(rate) if rate else 0.0
                # Counting packets demuxes without decoding, so it is cheap and exact for video streams.
                self.num_frames = sum(1 for packet in container.demux(stream) if packet.size)
        except (av.FFmpegError, IndexError) as err:
            raise VideoDecodeError(f"PyAV cannot open the video ({err})") from err

    def frames(self, indices: Sequence[int]) -> np.ndarray:
        wanted = {int(i) for i in indices}
        decoded: dict[int, np.ndarray] = {}
        try:
            with _file_of(self._source) as file, av.open(file) as container:
                for index, frame in enumerate(container.decode(video=0)):
                    if index in wanted:
                        decoded[index] = upright_rgb(frame, self._size)
                    if len(decoded) == len(wanted):
                        break
        except av.FFmpegError as err:
            raise VideoDecodeError(f"PyAV cannot decode frames ({err})") from err
        missing = wanted - decoded.keys()
        if missing:
            raise VideoDecodeError(f"frames {sorted(missing)[:3]} are past the end ({len(decoded)} decoded)")
        return np.stack([decoded[int(i)] for i in indices])


def quarter_turns(frame: av.VideoFrame) -> int:
    """Counter-clockwise quarter turns that show a frame upright: its display matrix (phone videos
    are stored sideways with a rotation to apply), as players and decord show it."""
    return round(frame.rotation / 90) % 4


def upright_rgb(frame: av.VideoFrame, size: tuple[int, int] | None = None) -> np.ndarray:
    """A decoded frame as RGB uint8 (H, W, 3), turned upright, at `size` (width, height) as shown."""
    turns = quarter_turns(frame)
    if size is not None and turns % 2:
        size = size[::-1]  # scale the stored (sideways) picture to the turned size
    image = frame.to_ndarray(format="rgb24", **({"width": size[0], "height": size[1]} if size else {}))
    return np.ascontiguousarray(np.rot90(image, turns)) if turns else image


def scaled_size(width: int, height: int, short_side: int) -> tuple[int, int]:
    """(width, height) scaled so that the shorter side is `short_side`, aspect ratio kept."""
    scale = short_side / min(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


class FallbackVideo:
    """decord, and PyAV for what decord fails on, at open or later (decord 0.6 cannot return frames
    8, 12, 16, 24, 48 or 72 pixels wide, for one)."""

    def __init__(
        self, source: VideoSource, *, width: int = -1, height: int = -1, num_threads: int = 1
    ) -> None:
        self._source, self._width, self._height = source, width, height
        self._video: Video
        try:
            self._video = DecordVideo(source, width=width, height=height, num_threads=num_threads)
        except VideoDecodeError:
            self._video = PyAVVideo(source, width=width, height=height)
        self.num_frames, self.fps = self._video.num_frames, self._video.fps

    def frames(self, indices: Sequence[int]) -> np.ndarray:
        try:
            return self._video.frames(indices)
        except VideoDecodeError:
            if isinstance(self._video, PyAVVideo):
                raise
            self._video = PyAVVideo(self._source, width=self._width, height=self._height)
            return self._video.frames(indices)


def open_video(
    source: VideoSource,
    *,
    size: tuple[int, int] | None = None,
    num_threads: int = 1,
    backend: Backend = "auto",
) -> Video:
    """Open an encoded video, bytes or a file; `size` is the decoded (width, height). `auto` is decord
    with PyAV as the fallback."""
    width, height = size or (-1, -1)
    if backend == "pyav":
        return PyAVVideo(source, width=width, height=height)
    if backend == "decord":
        return DecordVideo(source, width=width, height=height, num_threads=num_threads)
    return FallbackVideo(source, width=width, height=height, num_threads=num_threads)


@contextlib.contextmanager
def open_container(source: VideoSource) -> Iterator[av.container.InputContainer]:
    """PyAV's container of a video in memory or in a file (read as FFmpeg asks, never whole; a file
    object rather than its name, so any file name works). Raises VideoDecodeError."""
    with contextlib.ExitStack() as stack:
        file = stack.enter_context(_file_of(source))
        if file.seek(0, io.SEEK_END) == 0:
            raise VideoDecodeError("empty file")
        file.seek(0)
        try:
            container = stack.enter_context(av.open(file))
        except av.FFmpegError as err:
            raise VideoDecodeError(f"not a readable video container ({err.strerror or err})") from err
        yield container
