"""Videos stored sideways with a display rotation (as phones write them) come out upright everywhere:
decord applies the rotation, and so do PyAV decoding, the probe's size, the re-encode and the frames
store, so a rotated video looks the same whichever path reads it."""

from __future__ import annotations

import io

import decord
import numpy as np
import pytest
import simplejpeg
from media import encode, moving_frames

from vidtx.config import ReencodeConfig
from vidtx.media.decode import DecordVideo, PyAVVideo
from vidtx.media.encode import reencode
from vidtx.media.jpeg import video_to_frames
from vidtx.media.probe import probe_video

WIDTH, HEIGHT = 64, 32  # stored size: wide, so a quarter turn shows it tall


def mean_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


@pytest.mark.parametrize("rotation", [90, -90, 180])
def test_every_decoder_and_store_shows_a_rotated_video_upright(rotation: int) -> None:
    source = moving_frames(8, WIDTH, HEIGHT)
    data = encode(source, rotation=rotation)
    upright = np.rot90(source, rotation // 90, axes=(1, 2))  # what players show
    shown_height, shown_width = upright.shape[1:3]

    by_decord = DecordVideo(data).frames(range(8))
    by_pyav = PyAVVideo(data).frames(range(8))
    assert by_decord.shape == by_pyav.shape == upright.shape
    assert mean_error(by_decord, upright) < 3  # H.264 noise; a wrong turn is about 50
    assert mean_error(by_pyav, upright) < 3

    info = probe_video(data)
    assert (info.width, info.height) == (shown_width, shown_height)
    half = PyAVVideo(data, width=shown_width // 2, height=shown_height // 2).frames([0])
    assert half.shape == (1, shown_height // 2, shown_width // 2, 3)

    reencoded = reencode(data, ReencodeConfig(short_side=32, keyframe_interval=4))
    reader = decord.VideoReader(io.BytesIO(reencoded))
    assert mean_error(reader.get_batch(list(range(8))).asnumpy(), upright) < 4
    assert probe_video(reencoded) == probe_video(data)

    frames = video_to_frames(data, short_side=32, fps=None, quality=95)
    assert (frames.width, frames.height) == (shown_width, shown_height)
    first = simplejpeg.decode_jpeg(frames.data[frames.offsets[0] : frames.offsets[1]])
    assert mean_error(first, upright[0]) < 4
