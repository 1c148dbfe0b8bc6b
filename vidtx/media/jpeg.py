"""Writing a video as JPEG frames, the frames store's sample format (read by `vidtx.media.frames`).

A video's frames are packed into one tar member (the JPEG files back to back) with an index of byte
offsets in the sample's json: reading a sample is one member however many frames the video has, and
a clip decodes only its sampled frames. Encoding uses libjpeg-turbo (through simplejpeg), 4:2:0.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import av
import numpy as np
import simplejpeg

from vidtx.media.decode import VideoDecodeError, VideoSource, open_container
from vidtx.media.encode import resampled_frames


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


def video_to_frames(source: VideoSource, *, short_side: int, fps: float | None, quality: int) -> PackedFrames:
    """Decode a video (PyAV, single-threaded), resample it to `fps` with its short side at
    `short_side` (never upscaled), upright, and encode every frame as JPEG. Raises VideoDecodeError."""
    try:
        with open_container(source) as container:
            frames, rate = resampled_frames(container, short_side, fps, even=False)
            first = next(frames, None)
            if first is None:
                raise VideoDecodeError("undecodable: no frames")
            jpegs = [encode_jpeg(frame, quality) for frame in itertools.chain([first], frames)]
    except (av.FFmpegError, ValueError) as err:
        raise VideoDecodeError(f"undecodable: {err}") from err
    packed, offsets = pack_frames(jpegs)
    return PackedFrames(packed, offsets, rate, width=first.shape[1], height=first.shape[0])
