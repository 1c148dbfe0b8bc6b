"""Media files for tests: real video bytes written with PyAV (H.264 MP4, VP9 WebM, H.264 MKV, MPEG-4 AVI,
AAC-only MP4, variable frame rate), still images, and broken variants made with plain byte operations
(of the files, and of shards: a tar cut in a video).

Imported as `from media import ...`: tests/ has no __init__.py, so pytest (default "prepend" import
mode) puts tests/ on sys.path when it loads tests/conftest.py.
"""

import functools
import io
import tarfile
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

# --- frames --------------------------------------------------------------------------------------


def pattern_frames(num_frames: int, width: int, height: int) -> np.ndarray:
    """Frames that all differ (a diagonal ramp shifted by 9 levels per frame), uint8 (T, H, W, 3)."""
    y, x = np.mgrid[0:height, 0:width]
    t = np.arange(num_frames)[:, None, None]
    red = (3 * x + 9 * t) % 256
    green = np.broadcast_to((3 * y) % 256, red.shape)
    blue = np.broadcast_to((30 * t) % 256, red.shape)
    return np.stack([red, green, blue], axis=-1).astype(np.uint8)


def moving_frames(num_frames: int, width: int, height: int) -> np.ndarray:
    """A bright square moving right over a dark ramp; every frame differs. uint8 (T, H, W, 3)."""
    frames = np.zeros((num_frames, height, width, 3), np.uint8)
    frames[..., 1] = (np.arange(width) * 200 // width).astype(np.uint8)
    side = max(2, min(width, height) // 3)
    for t in range(num_frames):
        left = (t * max(1, width // num_frames)) % (width - side + 1)
        frames[t, :side, left : left + side] = 255
    return frames


# --- writing real files ----------------------------------------------------------------------------


def encode(
    frames: np.ndarray,
    container: str = "mp4",
    codec: str = "libx264",
    fps: int = 12,
    pts_ms: list[int] | None = None,
    rotation: int = 0,
    options: dict[str, str] | None = None,
) -> bytes:
    """Frames (T, H, W, 3) as a video file; `pts_ms` gives each frame its own timestamp (VFR);
    `rotation` (degrees) is written as the stream's display matrix, as phones do; `options` are the
    encoder's (for libx264 they replace the default `preset=ultrafast`, which has no B-frames)."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as output:
        stream = output.add_stream(codec, rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        if rotation:
            stream.set_display_rotation(rotation)
        if options is not None:
            stream.options = options
        elif codec == "libx264":
            stream.options = {"preset": "ultrafast"}
        if pts_ms is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
        for index, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            if pts_ms is not None:
                frame.pts, frame.time_base = pts_ms[index], Fraction(1, 1000)
            output.mux(stream.encode(frame))
        output.mux(stream.encode())
    return buffer.getvalue()


@functools.cache
def good() -> bytes:
    """A 12-frame 64x48 H.264 MP4 that every check accepts."""
    return encode(moving_frames(12, 64, 48))


VFR_PTS_MS = [0, 40, 80, 200, 240, 400, 420, 440, 700, 740, 780, 1000]


def vfr() -> bytes:
    """A 12-frame 64x48 H.264 MP4 with uneven timestamps (`VFR_PTS_MS`): variable frame rate."""
    return encode(moving_frames(12, 64, 48), pts_ms=VFR_PTS_MS)


def audio_only() -> bytes:
    """An MP4 holding half a second of AAC silence and no video stream."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as output:
        stream = output.add_stream("aac", rate=16000)
        stream.layout = "mono"
        for index in range(8):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 16000, index * 1024
            output.mux(stream.encode(frame))
        output.mux(stream.encode())
    return buffer.getvalue()


def png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(moving_frames(1, 32, 32)[0]).save(buffer, format="PNG")
    return buffer.getvalue()


# --- breaking them ---------------------------------------------------------------------------------


def corrupted(data: bytes) -> bytes:
    """The middle third of the MP4's media data overwritten with noise (the index stays intact)."""
    start = data.find(b"mdat") + 200
    noise = np.random.default_rng(0).integers(0, 256, len(data) // 3, dtype=np.uint8).tobytes()
    return data[:start] + noise + data[start + len(noise) :]


def truncated(data: bytes) -> bytes:
    """The file cut in the middle."""
    return data[: len(data) // 2]


def cut_in_video(tar: Path, sample: int) -> None:
    """A shard truncated in the middle of the video of its `sample`-th sample (counted from 0)."""
    with tarfile.open(tar) as archive:
        video = [m for m in archive.getmembers() if m.name.endswith(".mp4")][sample]
    tar.write_bytes(tar.read_bytes()[: video.offset_data + video.size // 2])


# --- every kind of bad and odd video, and a dataset of them ---------------------------------------

# name -> (how to write the file, reason the shard job gives, or None when the video is sharded)
VIDEO_CASES: dict[str, tuple[Callable[[], bytes] | None, str | None]] = {
    "corrupt.mp4": (lambda: corrupted(good()), "undecodable: PyAV cannot decode frames"),
    "truncated.mp4": (lambda: truncated(good()), "not a readable video container (Invalid data"),
    "zero_bytes.mp4": (lambda: b"", "empty file"),
    "notes.txt": (lambda: b"this is not a video\n" * 20, "not a readable video container (Invalid data"),
    "image.png": (png, "not a video: a still image (png_pipe)"),
    "audio_only.mp4": (audio_only, "no video stream"),
    "two_frames.mp4": (lambda: encode(moving_frames(2, 64, 48)), "too short: 2 frames < min_frames 3"),
    "missing.mp4": (None, "missing: file not found"),
    "a_folder.mp4": (None, "unreadable: a folder named like a video"),
    # sharded: fewer frames than the clip (padded when loading), odd sizes, VFR, other containers
    "five_frames.mp4": (lambda: encode(moving_frames(5, 64, 48)), None),
    "portrait.mp4": (lambda: encode(moving_frames(12, 48, 64)), None),
    "tiny.mp4": (lambda: encode(moving_frames(12, 18, 14)), None),
    "uhd_4k.mp4": (lambda: encode(moving_frames(3, 3840, 2160)), None),
    "vfr.mp4": (vfr, None),
    "vp9.webm": (lambda: encode(moving_frames(12, 64, 48), "webm", "libvpx-vp9"), None),
    "h264.mkv": (lambda: encode(moving_frames(12, 64, 48), "matroska"), None),
    "mpeg4.avi": (lambda: encode(moving_frames(12, 64, 48), "avi", "mpeg4"), None),
}

SHARDED = sorted(name for name, (_, reason) in VIDEO_CASES.items() if reason is None)


@functools.cache
def case_bytes(name: str) -> bytes:
    write = VIDEO_CASES[name][0]
    assert write is not None
    return write()


def write_dataset(folder: Path) -> Path:
    """Every video case plus four good videos, listed in a CSV (with bad rows of its own)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(4):
        (folder / f"good{index}.mp4").write_bytes(good())
        rows.append(f"good{index}.mp4,{'ab'[index % 2]}")
    for name, (write, _) in VIDEO_CASES.items():
        if write is not None:
            (folder / name).write_bytes(case_bytes(name))
        rows.append(f"{name},a")
    (folder / "a_folder.mp4").mkdir()
    rows += ["good0.mp4,b", "good1.mp4,a,train,extra", "good2.mp4,"]  # duplicate, 4 fields, no label
    (folder / "list.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    return folder / "list.csv"
