"""A video decoded segment by segment (`vidtx.media.segments`, how the served model and `vidtx predict`
read videos) gives decord's frames, pixel for pixel, and holds only the groups of pictures that hold
them: a long video's length costs no memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds
from media import encode, moving_frames

from vidtx import storage
from vidtx.config import ShardConfig
from vidtx.data.samples import open_sample
from vidtx.media.decode import DecordVideo, FallbackVideo, PyAVVideo, VideoDecodeError
from vidtx.media.encode import encode_mp4
from vidtx.media.segments import SegmentedVideo, open_segmented, packet_table
from vidtx.stages.shard import shard_dataset

SIZES = [None, (40, 30)]  # stored; scaled by the decoder
# sparse, repeated, unsorted, a window across a group boundary, the first and the last frame
INDICES = [[3, 50, 97], [40, 40, 12, 99], list(range(14, 22)), [0, 99]]


def sequential(data: bytes, size: tuple[int, int] | None) -> np.ndarray:
    """Every frame, decoded in order from the start: the reference."""
    width, height = size or (-1, -1)
    reader = DecordVideo(data, width=width, height=height)
    return reader.frames(range(reader.num_frames))


def segmented(data: bytes, size: tuple[int, int] | None) -> SegmentedVideo:
    width, height = size or (-1, -1)
    return SegmentedVideo(data, width=width, height=height)


@pytest.mark.parametrize("size", SIZES)
def test_closed_groups_give_decords_own_frames(size: tuple[int, int] | None) -> None:
    """H.264 with B-frames and a keyframe every 16 frames (as the re-encode writes): each request
    gives what decord's reader over the whole file gives, and the reference frames."""
    data = encode_mp4(moving_frames(100, 64, 48), fps=8, keyframe_interval=16)
    assert len(packet_table(data).keyframes) == 7
    reference = sequential(data, size)
    video = segmented(data, size)
    width, height = size or (-1, -1)
    whole = DecordVideo(data, width=width, height=height)
    assert (video.num_frames, video.fps) == (whole.num_frames, whole.fps) == (100, 8.0)
    for indices in INDICES:
        frames = video.frames(indices)
        np.testing.assert_array_equal(frames, whole.frames(indices))
        np.testing.assert_array_equal(frames, reference[indices])


OPEN_GROUPS = {  # frames shown before their group's keyframe, which need the group before
    "x264 open-gop": ("mp4", "libx264", {"x264-params": "open-gop=1:keyint=20:min-keyint=20:scenecut=0"}),
    "MPEG-4 part 2, B-frames": ("mp4", "mpeg4", {"g": "20", "bf": "2"}),
    "MPEG-4 in AVI": ("avi", "mpeg4", {"g": "20", "bf": "2"}),
}


@pytest.mark.parametrize(("container", "codec", "options"), OPEN_GROUPS.values(), ids=OPEN_GROUPS)
def test_open_groups_decode_with_the_group_before(container: str, codec: str, options: dict) -> None:
    """Open groups of pictures: each request gives the frames of a decoding in order from the start,
    which decord's own random access over the whole file does not (it drops a group's leading
    frames after a seek and counts the rest from there). Random requests, then windows in order,
    of one video longer than a segment: a request far from the segment's start once sought in it
    (57-60 of 80 requests wrong)."""
    data = encode(moving_frames(300, 64, 48), container, codec, fps=10, options=options)
    table = packet_table(data)
    assert table.leading.any()
    assert len(table.keyframes) >= 15
    reference = sequential(data, None)
    rng = np.random.default_rng(0)
    randomly = [rng.integers(0, 300, rng.integers(1, 9)).tolist() for _ in range(30)]
    windows = [list(range(first, first + 8, 2)) for first in range(0, 290, 10)]
    for requests in ([*INDICES, [19, 21, 39, 41, 59, 61], [150, 151], *randomly], windows):
        video = segmented(data, None)
        for indices in requests:
            np.testing.assert_array_equal(video.frames(indices), reference[indices], err_msg=str(indices))


def test_a_shards_copied_video_with_open_groups_gives_the_frames_of_a_decoding_in_order(
    tmp_path: Path,
) -> None:
    """Copied into a shard (no re-encode), a video with open groups of pictures is marked so in its
    json, and training and evaluation (`open_sample`) read its clips by segments: the frames of a
    decoding in order, where decord's reader would drop leading frames after a seek. A closed one is
    read by decord's reader as before."""
    videos = {
        name: encode(moving_frames(100, 64, 48), container, codec, fps=10, options=options)
        for name, (container, codec, options) in [
            ("open.mp4", OPEN_GROUPS["x264 open-gop"]),
            ("open.avi", OPEN_GROUPS["MPEG-4 in AVI"]),
        ]
    } | {"closed.mp4": encode_mp4(moving_frames(100, 64, 48), fps=10, keyframe_interval=20)}
    for name, data in videos.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "list.csv").write_text("path,label\n" + "".join(f"{name},a\n" for name in videos))
    shard_dataset(ShardConfig(source=tmp_path / "list.csv", output=tmp_path / "shards", processes=1))

    samples = list(wds.WebDataset(str(tmp_path / "shards/train-000000.tar"), shardshuffle=False))
    assert len(samples) == 3
    for sample in samples:
        meta = json.loads(sample["json"])
        assert meta["open_gop"] is meta["source"].startswith("open"), meta
        video, _ = open_sample(sample, short_side=48, num_threads=1)
        assert isinstance(video, SegmentedVideo) is meta["open_gop"]
        reference = sequential(videos[meta["source"]], None)
        for indices in [*INDICES, [19, 21, 39, 41, 59, 61]]:
            np.testing.assert_array_equal(video.frames(indices), reference[indices])


@pytest.mark.parametrize("rotation", [90, 180])
def test_a_rotated_video_comes_out_upright(rotation: int) -> None:
    data = encode(moving_frames(30, 64, 32), rotation=rotation)
    video, whole = SegmentedVideo(data), DecordVideo(data)
    np.testing.assert_array_equal(video.frames([0, 7, 29]), whole.frames([0, 7, 29]))
    shown = (64, 32) if rotation == 90 else (32, 64)  # (height, width) upright
    assert video.frames([0]).shape == (1, *shown, 3)


def test_packets_without_timestamps_are_read_whole() -> None:
    """A raw H.264 stream has no timestamps to cut it by: read whole (PyAV, where decord cannot)."""
    data = encode(moving_frames(30, 64, 48), "h264")
    video = open_segmented(data)
    assert isinstance(video, FallbackVideo)
    assert video.num_frames == 30
    np.testing.assert_array_equal(video.frames([2, 29]), PyAVVideo(data).frames([2, 29]))


def test_frames_outside_the_video_are_one_error() -> None:
    video = SegmentedVideo(encode(moving_frames(12, 64, 48)))
    with pytest.raises(VideoDecodeError, match=r"frames \[12\] asked for: not within 0-11"):
        video.frames([12])


PEAK = """
import json, sys
from vidtx.media.decode import DecordVideo
from vidtx.media.segments import SegmentedVideo
from vidtx.processes import peak_rss_mb
from vidtx.locations import location
from vidtx.storage import readable_file
where, way = sys.argv[1:]
path = readable_file(location(where))
video = DecordVideo(path) if way == "whole" else SegmentedVideo(path)
for first in range(0, video.num_frames - 8, 32):  # windows of 4 s at 8 fps, 8 frames each, in order
    video.frames(range(first, first + 8))
print(json.dumps(peak_rss_mb()))
"""


def test_a_longer_video_costs_no_more_memory(tmp_path: Path, bucket: str) -> None:
    """Windows read in order through 10 and 30 minutes of the same noise at 8 fps (a keyframe every
    250 frames; 13 and 39 MB files), each in a fresh process: by segments the peak resident memory
    hardly grows with the length, from a file or from an object in a bucket (read by ranged GETs),
    where decord's reader over the whole file, which holds about the encoded video from its
    opening, grows by about the file."""
    frames = np.random.default_rng(0).integers(0, 256, (30 * 480, 48, 64, 3), dtype=np.uint8)
    growth = {}
    for way in ("segments", "bucket", "whole"):
        peaks = []
        for minutes in (10, 30):
            path = tmp_path / f"{minutes}.mp4"
            if not path.exists():
                path.write_bytes(encode_mp4(frames[: minutes * 480], fps=8))
                storage.upload(path, f"{bucket}/{path.name}")
            source = f"{bucket}/{path.name}" if way == "bucket" else str(path)
            done = subprocess.run(
                [sys.executable, "-c", PEAK, source, way], capture_output=True, text=True, check=True
            )
            peaks.append(json.loads(done.stdout.splitlines()[-1]))
        growth[way] = peaks[1] - peaks[0]
    assert growth["segments"] < 10, growth  # MB; 4-6 measured
    assert growth["bucket"] < 10, growth
    assert growth["whole"] > 20, growth  # 30 measured: the test can tell the two apart
