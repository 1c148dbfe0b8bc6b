"""Decoding (decord from bytes or a file, PyAV fallback, probing), frame sampling and clip transforms."""

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import av
import decord
import numpy as np
import pytest
import torch

from vidtx.clips.crops import EvalTransform, three_crop_boxes
from vidtx.clips.normalize import normalize_clips
from vidtx.clips.sampling import FrameSampler
from vidtx.data.transforms import TrainTransform, random_resized_crop_box
from vidtx.media.decode import (
    DecordVideo,
    PyAVVideo,
    VideoDecodeError,
    open_video,
    scaled_size,
)
from vidtx.media.probe import probe_video
from vidtx.media.resize import resize_frames

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


# --- decoding ------------------------------------------------------------------------------------


def test_decord_from_bytes_equals_decord_from_the_file(
    tmp_path: Path, write_mp4: Callable[..., Path]
) -> None:
    path = write_mp4(tmp_path / "v.mp4", num_frames=12, width=64, height=48)
    video = DecordVideo(path.read_bytes(), num_threads=1)
    assert (video.num_frames, video.fps) == (12, 12.0)
    indices = [0, 3, 3, 11]
    expected = decord.VideoReader(str(path)).get_batch(indices).asnumpy()
    np.testing.assert_array_equal(video.frames(indices), expected)
    assert not np.array_equal(expected[0], expected[1])  # frames differ, so the check has teeth


def test_a_file_decodes_as_its_bytes_do(
    tmp_path: Path, write_mp4: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_mp4(tmp_path / "v.mp4", num_frames=12, width=64, height=48)
    data = path.read_bytes()
    assert probe_video(path) == probe_video(data)
    for backend in ("decord", "pyav", "auto"):
        for size in (None, (43, 32), (16, 12)):  # 16 px wide: decord fails, `auto` falls back to PyAV
            if backend == "decord" and size == (16, 12):
                continue
            by_file, by_bytes = (open_video(v, size=size, backend=backend) for v in (path, data))
            assert (by_file.num_frames, by_file.fps) == (by_bytes.num_frames, by_bytes.fps) == (12, 12.0)
            np.testing.assert_array_equal(by_file.frames([11, 0, 7, 7]), by_bytes.frames([11, 0, 7, 7]))
    # a relative name with a colon is a file, never taken for an FFmpeg protocol
    monkeypatch.chdir(tmp_path)
    shutil.copy(path, "http:v.mp4")
    np.testing.assert_array_equal(
        open_video(Path("http:v.mp4"), backend="decord").frames([3]), DecordVideo(data).frames([3])
    )


# the peak resident memory, in MB, that probing and opening a video file and decoding two of its frames
# add, once a small file of the same kind was: the modules that imports on first use (and, in a fresh
# clone, compiles: the figure moved from 10 to 24 MB by the order the tests ran in) are not the file's
OPEN_A_FILE = """
import sys
from pathlib import Path
from vidtx.media.decode import open_video
from vidtx.media.probe import probe_video
from vidtx.processes import peak_rss_mb

def probe_and_open(path):
    info = probe_video(path)
    open_video(path).frames([0, info.num_frames - 1])

probe_and_open(Path(sys.argv[1]))
before = peak_rss_mb()
probe_and_open(Path(sys.argv[2]))
print(peak_rss_mb() - before)
"""


def write_raw_mkv(path: Path, num_frames: int) -> Path:
    """Raw frames of noise (128x96, 25 fps) in Matroska: about 18 KB per frame, all written at once."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("rawvideo", rate=25)
        stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
        noise = np.random.default_rng(0).integers(0, 256, (96, 128, 3), dtype=np.uint8)
        for i in range(num_frames):
            frame = av.VideoFrame.from_ndarray(np.roll(noise, i, axis=1), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def test_a_video_file_is_read_as_asked_never_whole(tmp_path: Path) -> None:
    """Probing and opening a file hold neither its bytes nor its packets: a 70 MB file (raw frames,
    written at once) adds less than a third of its size to the peak; held whole, once by the bytes,
    once by the probe's packets and once by decord's copy, it added three times its size."""
    small, path = write_raw_mkv(tmp_path / "small.mkv", 10), write_raw_mkv(tmp_path / "raw.mkv", 4000)
    size_mb = path.stat().st_size / 2**20
    assert size_mb > 60
    done = subprocess.run(
        [sys.executable, "-c", OPEN_A_FILE, str(small), str(path)], capture_output=True, text=True, check=True
    )
    assert float(done.stdout) < size_mb / 3


def test_resize_on_decode(tmp_path: Path, write_mp4: Callable[..., Path]) -> None:
    data = write_mp4(tmp_path / "v.mp4", width=64, height=48).read_bytes()
    assert scaled_size(64, 48, 32) == (43, 32)
    assert scaled_size(48, 64, 96) == (96, 128)
    for backend in ("decord", "pyav", "auto"):
        frames = open_video(data, size=(43, 32), backend=backend).frames([1, 2])
        assert frames.shape == (2, 32, 43, 3)
        assert frames.dtype == np.uint8


def test_pyav_decodes_the_same_frames_as_decord(tmp_path: Path, write_mp4: Callable[..., Path]) -> None:
    data = write_mp4(tmp_path / "v.mp4", num_frames=10).read_bytes()
    pyav, reference = PyAVVideo(data), DecordVideo(data)
    assert (pyav.num_frames, pyav.fps) == (reference.num_frames, reference.fps)
    np.testing.assert_array_equal(pyav.frames([9, 0, 4, 4]), reference.frames([9, 0, 4, 4]))
    resized = pyav.__class__(data, width=40, height=30).frames([2]).astype(int)
    assert np.abs(resized - DecordVideo(data, width=40, height=30).frames([2]).astype(int)).mean() < 3
    with pytest.raises(VideoDecodeError, match="past the end"):
        pyav.frames([10])


def test_auto_falls_back_to_pyav_where_decord_fails(tmp_path: Path, write_mp4: Callable[..., Path]) -> None:
    data = write_mp4(tmp_path / "v.mp4", width=64, height=48).read_bytes()
    with pytest.raises(VideoDecodeError):  # decord 0.6 cannot return frames 16 px wide
        DecordVideo(data, width=16, height=12).frames([0])
    frames = open_video(data, size=(16, 12)).frames([0, 5])
    assert frames.shape == (2, 12, 16, 3)


def test_probe_reports_the_stream_and_why_a_file_is_bad(
    tmp_path: Path, write_mp4: Callable[..., Path]
) -> None:
    data = write_mp4(tmp_path / "v.mp4", num_frames=9, width=64, height=48, fps=6).read_bytes()
    info = probe_video(data)
    assert (info.num_frames, info.fps, info.width, info.height) == (9, 6.0, 64, 48)
    assert info.duration == pytest.approx(1.5)
    bad = {
        b"": "empty file",
        b"GIF89a" + bytes(200): "not a readable video container",
        data[: len(data) // 2]: "not a readable video container",  # the index (moov) is at the end
    }
    mdat = data.find(b"mdat")
    bad[data[: mdat + 8] + bytes(len(data) // 3) + data[mdat + 8 + len(data) // 3 :]] = "undecodable"
    file = tmp_path / "bad.mp4"
    for payload, reason in bad.items():
        file.write_bytes(payload)
        for source in (payload, file):  # the same answer for the bytes and for the file
            with pytest.raises(VideoDecodeError, match=f"^{reason}"):
                probe_video(source)


# --- sampling ------------------------------------------------------------------------------------


def test_segment_sampling_takes_one_frame_per_segment() -> None:
    sampler = FrameSampler("segment", num_frames=4)
    rng = np.random.default_rng(0)
    draws = np.stack([sampler.train(40, rng) for _ in range(200)])  # segments [0,10) [10,20) ...
    assert draws.shape == (200, 4)
    for segment in range(4):
        assert draws[:, segment].min() >= 10 * segment
        assert draws[:, segment].max() < 10 * (segment + 1)
        assert len(np.unique(draws[:, segment])) > 5  # random offsets in training
    np.testing.assert_array_equal(sampler.test(40), [[5, 15, 25, 35]])  # segment centres
    np.testing.assert_array_equal(sampler.test(40, num_clips=2), [[2, 12, 22, 32], [7, 17, 27, 37]])


def test_dense_sampling_uses_the_stride_inside_the_video() -> None:
    sampler = FrameSampler("dense", num_frames=4, stride=3)  # spans 10 frames
    rng = np.random.default_rng(0)
    starts = set()
    for _ in range(200):
        indices = sampler.train(30, rng)
        np.testing.assert_array_equal(np.diff(indices), [3, 3, 3])
        assert indices[0] >= 0
        assert indices[-1] <= 29
        starts.add(int(indices[0]))
    assert starts == set(range(21))
    np.testing.assert_array_equal(sampler.test(30), [[10, 13, 16, 19]])  # centred
    np.testing.assert_array_equal(sampler.test(30, num_clips=3)[:, 0], [3, 10, 17])


@pytest.mark.parametrize("mode", ["segment", "dense"])
def test_short_videos_are_padded_by_repeating_frames(mode: str) -> None:
    sampler = FrameSampler(mode, num_frames=8, stride=2)
    rng = np.random.default_rng(0)
    for indices in [sampler.train(3, rng), sampler.test(3)[0]]:
        assert indices.shape == (8,)
        assert set(indices.tolist()) <= {0, 1, 2}
        assert np.all(np.diff(indices) >= 0)
        assert indices[-1] == 2 or mode == "segment"


# --- transforms ----------------------------------------------------------------------------------


def asymmetric_frames(num_frames: int = 4, height: int = 40, width: int = 60) -> np.ndarray:
    """Identical frames with a horizontal ramp (so a flip is visible), uint8 (T, H, W, 3)."""
    ramp = np.linspace(0, 255, width).astype(np.uint8)
    return np.ascontiguousarray(np.broadcast_to(ramp[None, None, :, None], (num_frames, height, width, 3)))


def test_train_transform_applies_one_crop_to_every_frame() -> None:
    transform = TrainTransform(32, (0.3, 1.0), horizontal_flip=True)
    rng = np.random.default_rng(0)
    for _ in range(20):
        clip = transform(asymmetric_frames(), rng)
        assert clip.shape == (4, 32, 32, 3)  # (T, H, W, C), the decoders' layout
        assert clip.dtype == torch.uint8
        for t in range(1, 4):
            torch.testing.assert_close(clip[t], clip[0])


def test_the_uint8_resize_matches_a_float_resize_within_rounding() -> None:
    frames = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (2, 40, 60, 3), dtype=np.uint8))
    resized = resize_frames(frames, 32, 48)  # (T, 32, 48, C)
    planes = frames.permute(0, 3, 1, 2).float()
    reference = torch.nn.functional.interpolate(planes, size=(32, 48), mode="bilinear", antialias=True)
    assert resized.shape == (2, 32, 48, 3)
    assert (resized.permute(0, 3, 1, 2).float() - reference).abs().max() <= 1.0
    assert resize_frames(frames, 40, 60) is frames  # the right size already: untouched


def test_random_resized_crop_box_respects_the_scale_range() -> None:
    rng = np.random.default_rng(0)
    for _ in range(500):
        top, left, height, width = random_resized_crop_box(60, 80, (0.3, 0.5), rng)
        assert top >= 0
        assert left >= 0
        assert top + height <= 60
        assert left + width <= 80
        assert 0.25 <= height * width / (60 * 80) <= 0.55


def test_horizontal_flip_happens_only_when_enabled() -> None:
    frames = asymmetric_frames()
    rng = np.random.default_rng(0)
    never = TrainTransform(32, (1.0, 1.0), horizontal_flip=False)
    assert all(never(frames, rng)[0, 0, -1, 0] > never(frames, rng)[0, 0, 0, 0] for _ in range(30))
    sometimes = TrainTransform(32, (1.0, 1.0), horizontal_flip=True)
    increasing = [
        bool(clip[0, 0, -1, 0] > clip[0, 0, 0, 0]) for clip in (sometimes(frames, rng) for _ in range(60))
    ]
    assert 10 < sum(increasing) < 50


def test_normalize_clips_is_the_one_normalisation_to_the_model_layout() -> None:
    pixels = torch.tensor([0, 128, 255], dtype=torch.uint8)
    clips = pixels.view(1, 1, 1, 1, 3).expand(2, 4, 5, 6, 3)  # uint8 (B, T, H, W, C)
    out = normalize_clips(clips, MEAN, STD)
    assert out.shape == (2, 3, 4, 5, 6)  # (B, C, T, H, W)
    assert out.dtype == torch.float32
    assert out.is_contiguous()
    torch.testing.assert_close(out[0, :, 0, 0, 0], torch.tensor([-2.0, (128 / 255 - 0.5) / 0.25, 2.0]))
    assert normalize_clips(clips, MEAN, STD, torch.bfloat16).dtype == torch.bfloat16
    views = clips[None]  # (1, B, T, H, W, C): leading dimensions pass through
    assert normalize_clips(views, MEAN, STD).shape == (1, 2, 3, 4, 5, 6)


def test_test_time_crops() -> None:
    assert three_crop_boxes(32, 60, 32) == [(0, 0, 32, 32), (0, 14, 32, 32), (0, 28, 32, 32)]
    assert three_crop_boxes(50, 32, 32) == [(0, 0, 32, 32), (9, 0, 32, 32), (18, 0, 32, 32)]
    frames = asymmetric_frames(height=32, width=60)
    views = EvalTransform(32, 3)(frames)
    assert views.shape == (3, 4, 32, 32, 3)  # (crops, T, H, W, C)
    assert views.dtype == torch.uint8
    assert views[0].float().mean() < views[1].float().mean() < views[2].float().mean()  # left, centre, right
    centre = EvalTransform(32, 1)(frames)
    torch.testing.assert_close(centre[0], views[1])
    with pytest.raises(ValueError, match="1 or 3"):
        EvalTransform(32, 2)
