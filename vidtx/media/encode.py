"""Writing video with PyAV: frames to MP4 bytes, and the training-friendly re-encode.

Both run the encoder single-threaded, which makes the output a pure function of the input (the same
bytes on every run, the property the sharding job's byte-identical guarantee rests on) and leaves
parallelism to the process pool above.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterable, Iterator
from fractions import Fraction

import av
import numpy as np

from vidtx.config import ReencodeConfig
from vidtx.media.decode import VideoSource, open_container, quarter_turns, scaled_size, upright_rgb


def video_codec() -> str:
    """H.264 when the PyAV wheel ships libx264, else MPEG-4 part 2 (decord reads both)."""
    return "libx264" if "libx264" in av.codecs_available else "mpeg4"


def size_for_short_side(width: int, height: int, short_side: int, *, even: bool) -> tuple[int, int]:
    """(width, height) scaled so the shorter side is `short_side` (never upscaled); with `even`, both
    rounded down to even numbers, as H.264 in yuv420p needs (JPEG frames keep an odd size)."""
    scaled = scaled_size(width, height, min(short_side, width, height))
    return (max(2, scaled[0] - scaled[0] % 2), max(2, scaled[1] - scaled[1] % 2)) if even else scaled


def encode_mp4(
    frames: Iterable[np.ndarray], fps: float, *, crf: int = 18, keyframe_interval: int | None = None
) -> bytes:
    """Encode RGB uint8 frames, each (H, W, 3) with even H and W, into MP4 bytes."""
    frames = iter(frames)
    first = next(frames, None)
    if first is None:
        raise ValueError("no frames to encode")
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as container:
        stream = container.add_stream(video_codec(), rate=Fraction(fps).limit_denominator(1001))
        stream.height, stream.width = first.shape[:2]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.thread_count = 1
        h264 = stream.codec_context.name == "libx264"
        # mbtree=0: x264's macroblock-tree rate control made ~1-3% of encodes of small frames (64 px)
        # differ from run to run even single-threaded; without it the output is a pure function.
        options = (
            {"crf": str(crf), "preset": "veryfast", "x264-params": "mbtree=0"} if h264 else {"qscale": "3"}
        )
        if keyframe_interval is not None:
            # A fixed GOP with no scene-cut keyframes: seeking to frame i decodes at most k-1 extras.
            options |= {
                "g": str(keyframe_interval),
                "keyint_min": str(keyframe_interval),
                "sc_threshold": "0",
            }
        stream.options = options
        for frame in itertools.chain([first], frames):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()


def resampled_frames(
    container: av.container.InputContainer,
    short_side: int,
    fps: float | None = None,
    max_seconds: float | None = None,
    *,
    even: bool,
) -> tuple[Iterator[np.ndarray], float]:
    """The video's RGB frames (H, W, 3) with the short side scaled to `short_side` (never up; even
    sizes with `even`), at `fps` (None: the source's rate), cut to `max_seconds`; and that frame rate. Decodes
    single-threaded, as the frames come (the container must stay open while they are read)."""
    stream = container.streams.video[0]
    stream.thread_count = 1
    source_fps = float(stream.average_rate or stream.guessed_rate or 25)
    fps = fps or source_fps

    def frames() -> Iterator[np.ndarray]:
        start: float | None = None
        size: tuple[int, int] | None = None  # (width, height) upright, from the first frame
        slot = 0  # output frame `slot` shows the first source frame at or after slot / fps
        for index, frame in enumerate(container.decode(stream)):
            time = frame.time if frame.time is not None else index / source_fps
            start = time if start is None else start
            time -= start
            if max_seconds is not None and time >= max_seconds:
                return
            if size is None:
                shown = (
                    (frame.height, frame.width) if quarter_turns(frame) % 2 else (frame.width, frame.height)
                )
                size = size_for_short_side(*shown, short_side, even=even)
            image = upright_rgb(frame, size)  # the output is upright and carries no rotation
            while slot / fps <= time + 1e-6:
                yield image
                slot += 1

    return frames(), fps


def reencode(source: VideoSource, cfg: ReencodeConfig) -> bytes:
    """Transcode a video to H.264 MP4 with a smaller short side, an optional new frame rate and cut,
    and a short keyframe interval, so that sparse frame sampling decodes few frames. Audio is dropped;
    a rotated video is written upright."""
    with open_container(source) as container:
        frames, fps = resampled_frames(container, cfg.short_side, cfg.fps, cfg.max_seconds, even=True)
        return encode_mp4(frames, fps, crf=cfg.crf, keyframe_interval=cfg.keyframe_interval)
