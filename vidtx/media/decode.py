"""Video decoding behind one small interface: decord, PyAV as the fallback, from bytes in memory or a file.

decord is fast at random access but unmaintained since 2021, so the rest of vidtx only sees `Video`
(frame count, frame rate, `frames(indices)`). Readers are built per video inside the process that
decodes (never shared with DataLoader workers: decord deadlocks there). Resizing happens in the
decoder (FFmpeg's scaler), which is far cheaper than resizing full-size frames afterwards. A video in a
file is read as the decoder asks, never whole, and probing streams too, so opening a long video costs
memory for its frame index only, not for its encoded length.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, Protocol

import av
import decord
import numpy as np

Backend = Literal["auto", "decord", "pyav"]
VideoSource = bytes | Path  # encoded video in memory, or a file read as a stream (never whole)


class VideoDecodeError(RuntimeError):
    """A video could not be read; the message is a short reason fit for a rejects list or a log."""


@dataclass(frozen=True)
class VideoInfo:
    num_frames: int
    fps: float
    width: int
    height: int
    # frames shown before their group's keyframe in a group after the first (an open group of
    # pictures): decord's random access drops them after a seek and counts the rest from there
    open_gop: bool = False

    @property
    def duration(self) -> float:
        return self.num_frames / self.fps if self.fps else 0.0


class Video(Protocol):
    num_frames: int
    fps: float

    def frames(self, indices: Sequence[int]) -> np.ndarray:
        """RGB frames at `indices` (repeats allowed), uint8 of shape (T, H, W, 3)."""
        ...


@contextlib.contextmanager
def _file_of(source: VideoSource) -> Iterator[BinaryIO]:
    """A video as a file object: over its bytes in memory, or its file opened (read as asked)."""
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
        uri = io.BytesIO(source) if isinstance(source, bytes) else str(source.absolute())
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


def _is_still_image(container: av.container.InputContainer) -> bool:
    """FFmpeg reads PNG, JPEG, BMP, WebP ... as one-frame videos through its image demuxers."""
    name = container.format.name
    return name == "image2" or name.endswith("_pipe")


def _video_stream(container: av.container.InputContainer) -> av.video.stream.VideoStream:
    if not container.streams.video:
        raise VideoDecodeError("no video stream")
    if _is_still_image(container):
        raise VideoDecodeError(f"not a video: a still image ({container.format.name})")
    return container.streams.video[0]


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


def _decoded(decoder: av.CodecContext, packets: Sequence[av.Packet]) -> Iterator[av.VideoFrame]:
    """The frames of `packets`, then those the decoder still holds."""
    for packet in packets:
        yield from decoder.decode(packet)
    yield from decoder.decode(None)


@dataclass
class _Demuxed:
    """What probing keeps of a stream as it is demuxed: bounded, whatever its length."""

    num_packets: int = 0
    last_key: av.Packet | None = None  # the latest keyframe's packet (the first packet without one)
    groups: int = 0  # keyframes seen (a first packet without one counts as one)
    open_gop: bool = False  # a packet after a later group's keyframe in decoding, before it in time
    first: av.VideoFrame | None = None
    undecodable: av.FFmpegError | None = None  # why the first frame did not decode


def _demux(container: av.container.InputContainer, stream: av.video.stream.VideoStream) -> _Demuxed:
    """Every packet of `stream` read and counted; the first frame decoded from the first packets on
    the way. A decoding error is kept, not raised: a cut file's demuxing error, later in the file,
    is the one to report, as when the packets were all read before any was decoded."""
    seen, decoder = _Demuxed(), stream.codec_context
    for packet in container.demux(stream):
        if not packet.size:
            continue  # the demuxer's flush packet at the end
        seen.num_packets += 1
        if packet.is_keyframe or seen.last_key is None:
            seen.last_key, seen.groups = packet, seen.groups + 1
        elif seen.groups > 1 and None not in (packet.pts, seen.last_key.pts):
            seen.open_gop |= packet.pts < seen.last_key.pts
        if seen.first is None and seen.undecodable is None:
            try:
                seen.first = next(iter(decoder.decode(packet)), None)
            except av.FFmpegError as err:
                seen.undecodable = err
    return seen


def probe_video(source: VideoSource) -> VideoInfo:
    """Frame count, frame rate and size of a video, proven readable at the least cost: the container
    opens and holds a video stream, every packet of it can be read (a cut file ends early), and the
    first frame and the last keyframe decode. Single-threaded PyAV, so the same bytes always give the
    same answer. Costs a demux and two decoded frames, where decoding the last frame could cost a
    whole group of pictures (up to the whole video), and streams: it holds one packet and one frame,
    however long the video. The size is the upright one (display matrix applied), as the decoders
    return frames; the packets' timestamps tell whether groups of pictures are open."""
    with open_container(source) as container:
        stream = _video_stream(container)
        stream.thread_count = 1
        decoder = stream.codec_context
        try:
            seen = _demux(container, stream)
            if seen.undecodable is not None:
                raise seen.undecodable
            if seen.last_key is None:
                raise VideoDecodeError("undecodable: no frames")
            first = seen.first
            if first is None:  # the frames the decoder still holds
                first = next(iter(decoder.decode(None)), None)
            decoder.flush_buffers()  # a fresh start at the keyframe (also after a drain)
            last = next(_decoded(decoder, [seen.last_key]), None)
        except av.FFmpegError as err:
            raise VideoDecodeError(f"undecodable: PyAV cannot decode frames ({err})") from err
        if first is None or last is None:
            raise VideoDecodeError("undecodable: no frame decodes")
        rate = stream.average_rate or stream.guessed_rate
        width, height = (
            (first.height, first.width) if quarter_turns(first) % 2 else (first.width, first.height)
        )
        return VideoInfo(
            num_frames=seen.num_packets,
            fps=float(rate) if rate else 0.0,
            width=width,
            height=height,
            open_gop=seen.open_gop,
        )
