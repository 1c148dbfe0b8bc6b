"""What a video is, proven readable at the least cost: its frame count, rate, upright size and
whether its groups of pictures are open, from one demux and two decoded frames (`probe_video`), and
on request its packets' timestamps, which decoding by segments cuts it by."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import av
import numpy as np

from vidtx.media.decode import VideoDecodeError, VideoSource, open_container, quarter_turns


@dataclass(frozen=True)
class Packets:
    """A video stream's packets in decoding order, as demuxed (`vidtx.media.segments` cuts by them)."""

    pts: np.ndarray | None  # (N,) int64 presentation timestamps; None where a packet has none
    keyframes: np.ndarray  # (N,) bool
    rotation: float  # the display rotation of the frames, degrees


@dataclass(frozen=True)
class VideoInfo:
    num_frames: int
    fps: float
    width: int
    height: int
    # frames shown before their group's keyframe in a group after the first (an open group of
    # pictures): decord's random access drops them after a seek and counts the rest from there
    open_gop: bool = False
    packets: Packets | None = None  # with `probe_video(..., packets=True)`

    @property
    def duration(self) -> float:
        return self.num_frames / self.fps if self.fps else 0.0


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


def _decoded(decoder: av.CodecContext, packets: Sequence[av.Packet]) -> Iterator[av.VideoFrame]:
    """The frames of `packets`, then those the decoder still holds."""
    for packet in packets:
        yield from decoder.decode(packet)
    yield from decoder.decode(None)


@dataclass
class _Demuxed:
    """What probing keeps of a stream as it is demuxed: bounded, whatever its length (but for the
    packets' timestamps and keyframe flags, when asked for)."""

    num_packets: int = 0
    last_key: av.Packet | None = None  # the latest keyframe's packet (the first packet without one)
    groups: int = 0  # keyframes seen (a first packet without one counts as one)
    open_gop: bool = False  # a packet after a later group's keyframe in decoding, before it in time
    first: av.VideoFrame | None = None
    undecodable: av.FFmpegError | None = None  # why the first frame did not decode
    pts: list[int | None] | None = None  # each packet's, when asked for
    keys: list[bool] = field(default_factory=list)  # (with `pts`)


def _demux(
    container: av.container.InputContainer, stream: av.video.stream.VideoStream, packets: bool
) -> _Demuxed:
    """Every packet of `stream` read and counted (with `packets`, its timestamp and keyframe flag
    kept); the first frame decoded from the first packets on the way. A decoding error is kept, not
    raised: a cut file's demuxing error, later in the file, is the one to report, as when the
    packets were all read before any was decoded."""
    seen, decoder = _Demuxed(pts=[] if packets else None), stream.codec_context
    for packet in container.demux(stream):
        if not packet.size:
            continue  # the demuxer's flush packet at the end
        seen.num_packets += 1
        if seen.pts is not None:
            seen.pts.append(packet.pts)
            seen.keys.append(packet.is_keyframe)
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


def probe_video(source: VideoSource, *, packets: bool = False) -> VideoInfo:
    """Frame count, frame rate and size of a video, proven readable at the least cost: the container
    opens and holds a video stream, every packet of it can be read (a cut file ends early), and the
    first frame and the last keyframe decode. Single-threaded PyAV, so the same bytes always give the
    same answer. Costs a demux and two decoded frames, where decoding the last frame could cost a
    whole group of pictures (up to the whole video), and streams: it holds one packet and one frame,
    however long the video. The size is the upright one (display matrix applied), as the decoders
    return frames; the packets' timestamps tell whether groups of pictures are open. With `packets`,
    they are kept (`VideoInfo.packets`, a few numbers per packet)."""
    with open_container(source) as container:
        stream = _video_stream(container)
        stream.thread_count = 1
        decoder = stream.codec_context
        try:
            seen = _demux(container, stream, packets)
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
            packets=None if seen.pts is None else _packets(seen, first.rotation),
        )


def _packets(seen: _Demuxed, rotation: float) -> Packets:
    assert seen.pts is not None, "packets were kept"
    timed = None not in seen.pts
    return Packets(
        pts=np.array(seen.pts, dtype=np.int64) if timed else None,
        keyframes=np.array(seen.keys, dtype=bool),
        rotation=rotation,
    )
