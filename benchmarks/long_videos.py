"""Issue 60 point 2: a long video scored window by window, against its length.

Videos of 1, 10 and 60 minutes (generated: 64x48 noise at 8 fps, H.264, a keyframe every 250 frames)
are read window by window, 4 s every 4 s, three ways, each in a fresh process so that its peak
resident memory (VmHWM: `ru_maxrss` would count the parent's peak, 265 MB of frames for the hour) is
its own:

- `segments`: what the served model and `vidtx predict` do (`vidtx.media.segments`): decord is given
  small MP4s of the groups of pictures that hold the frames asked for;
- `segments, bucket`: the same from an object in a bucket (SeaweedFS on 127.0.0.1, `benchmarks/local_bucket.py`), read by
  ranged GETs (`vidtx.storage.ObjectFile`); the bytes it reads, against the object's, and its GETs;
- `whole file`: the baseline, one decord reader over the file, whose memory grows with the encoded
  length it has read past (about the file).

Two measurements each: decoding alone (each window's centre clip at the crop's short side, no model:
the memory decoding holds, apart from torch's), and scoring (`VideoClassifier.classify_windows`, the
demo's X-ViT, untrained: the cost does not depend on the weights, one view a window), windows per
second and peak RSS. Ratios against the 1-minute video's and against the whole file's.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.local_bucket import local_bucket
from benchmarks.results import BenchmarkResult, Table, fmt
from infra.local.latency_proxy import requests
from vidtx import storage
from vidtx.media.encode import encode_mp4

log = logging.getLogger(__name__)

MINUTES = (1, 10, 60)
QUICK_MINUTES = (0.25, 1)
FPS, WIDTH, HEIGHT, WINDOW = 8, 64, 48, 4.0
MODES = ("whole file", "segments", "segments, bucket")
DEMO = Path(__file__).resolve().parent.parent / "configs/experiments/demo.yaml"
# run in a fresh interpreter: the windows of one video decoded one way; prints its figures
OPEN = f"""
import json, sys, time
from vidtx.clips.sampling import FrameSampler
from vidtx.clips.windows import plan_windows
from vidtx.config import load_config
from vidtx.media.decode import DecordVideo, scaled_size
from vidtx.media.probe import probe_video
from vidtx.media.segments import open_segmented
from vidtx.processes import peak_rss_mb
from vidtx.locations import location
from vidtx.storage import ranged, readable_file
where, way = sys.argv[1], sys.argv[2]
path = readable_file(location(where))
fetched = 0  # bytes the ranged reads of an object fetched
def counted(self, buffer, read=ranged._Ranges.readinto):
    global fetched
    size = read(self, buffer)
    fetched += size
    return size
def counted_whole(self, read=ranged._Ranges.readall):
    global fetched
    data = read(self)
    fetched += len(data)
    return data
ranged._Ranges.readinto, ranged._Ranges.readall = counted, counted_whole
config = load_config({str(DEMO)!r}, ["eval.num_clips=1", "eval.num_crops=1"])
info = probe_video(path, packets=way != "whole file")  # as the served model opens a video
size = scaled_size(info.width, info.height, config.data.crop_size)
video = DecordVideo(path, width=size[0], height=size[1]) if way == "whole file" else open_segmented(path, size=size, probed=info)
"""
DECODE = (
    OPEN
    + f"""
sampler = FrameSampler(config.data.sampling, config.data.num_frames, config.data.frame_stride)
started = time.perf_counter()
windows, _ = plan_windows(video.num_frames, video.fps, {WINDOW}, {WINDOW})
for window in windows:
    video.frames((window.first + sampler.test(window.last - window.first, 1)).ravel().tolist())
seconds = time.perf_counter() - started
print(json.dumps({{"windows": len(windows), "seconds": seconds, "peak_rss_mb": peak_rss_mb(), "read_mb": fetched / 1e6}}))
"""
)
SCORE = (
    OPEN
    + f"""
import torch
from vidtx.model_factory import model_for
from vidtx.serving.classifier import VideoClassifier
torch.set_num_threads(1)
classifier = VideoClassifier.of(model_for(config, num_classes=8), config, [str(i) for i in range(8)])
classifier.open = lambda _: video  # the way asked for, where the served model opens by segments
started = time.perf_counter()
rows = classifier.classify_windows(where, window={WINDOW}, hop={WINDOW}, top_k=1, num_clips=1, num_crops=1)
seconds = time.perf_counter() - started
assert all(row.error is None for row in rows), rows[:3]
print(json.dumps({{"windows": len(rows) - 1, "seconds": seconds, "peak_rss_mb": peak_rss_mb(), "read_mb": fetched / 1e6}}))
"""
)


def write_video(path: Path, minutes: float) -> int:
    """Noise frames at 8 fps for `minutes` (made whole: 265 MB for an hour, in this process, not in
    the measured one); the file's size."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (int(minutes * 60 * FPS), HEIGHT, WIDTH, 3), dtype=np.uint8)
    path.write_bytes(encode_mp4(frames, fps=FPS))
    return path.stat().st_size


def measure(script: str, where: str, way: str, log_file: Path) -> dict:
    """The figures of `script` over the video at `where`, and the GET requests it made."""
    mark = log_file.stat().st_size
    done = subprocess.run(
        [sys.executable, "-c", script, where, way], capture_output=True, text=True, check=True
    )
    gets = sum(request.startswith("GET ") for request in requests(log_file, mark))
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"gets": gets}


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    lengths = QUICK_MINUTES if quick else MINUTES
    tasks = {"decoding alone": DECODE, "scoring": SCORE}
    raw: dict[str, dict[str, dict[str, dict]]] = {task: {way: {} for way in MODES} for task in tasks}
    with tempfile.TemporaryDirectory() as folder, local_bucket(Path(folder), "long-videos") as local:
        bucket = local.url
        for minutes in lengths:
            video = Path(folder) / f"{minutes}min.mp4"
            size = write_video(video, minutes)
            storage.upload(video, f"{bucket}/{video.name}")
            for task, script in tasks.items():
                for way in MODES:
                    log.info("%s: a %g-minute video window by window (%s)", task, minutes, way)
                    where = f"{bucket}/{video.name}" if way.endswith("bucket") else str(video)
                    figures = measure(script, where, way, local.log)
                    raw[task][way][f"{minutes:g} min"] = figures | {"file_mb": size / 1e6}
            video.unlink()
            storage.delete(f"{bucket}/{video.name}")
    tables = [_table(task, raw[task]) for task in tasks]
    first, longest = f"{lengths[0]:g} min", f"{lengths[-1]:g} min"
    notes = [
        f"{task}, {way}: from {first} to {longest} the peak RSS goes from {fmt(cases[way][first]['peak_rss_mb'])} "
        f"to {fmt(cases[way][longest]['peak_rss_mb'])} MB (+{fmt(_growth(cases[way], first, longest))} MB; "
        f"the file grows by {fmt(cases[way][longest]['file_mb'] - cases[way][first]['file_mb'])} MB)."
        for task, cases in raw.items()
        for way in MODES
    ] + [
        f"{task}, segments from a bucket, {label}: {fmt(case['read_mb'])} MB read of a {fmt(case['file_mb'])} MB "
        f"object ({fmt(case['read_mb'] / case['file_mb'], 2)}x) in {case['gets']} GETs."
        for task, cases in raw.items()
        for label, case in cases["segments, bucket"].items()
    ]
    return BenchmarkResult(
        name="long_videos",
        title="Long videos window by window: throughput and peak memory against length",
        summary=(__doc__ or "").strip(),
        inputs={"minutes": lengths, "fps": FPS, "size": [WIDTH, HEIGHT], "window_s": WINDOW, "threads": 1},
        tables=tables,
        raw=raw,
        notes=notes,
        quick=quick,
    )


def _table(task: str, cases: dict[str, dict[str, dict]]) -> Table:
    rows = []
    for label in cases[MODES[0]]:
        for way in MODES:
            case, first, whole = (
                cases[way][label],
                next(iter(cases[way].values())),
                cases["whole file"][label],
            )
            rows.append(
                [
                    label,
                    way,
                    fmt(case["file_mb"]),
                    str(case["windows"]),
                    fmt(_rate(case)),
                    f"{fmt(_rate(case) / _rate(whole), 2)}x",
                    fmt(case["peak_rss_mb"]),
                    f"+{fmt(case['peak_rss_mb'] - first['peak_rss_mb'])}",
                    f"{fmt(case['peak_rss_mb'] / whole['peak_rss_mb'], 2)}x",
                ]
            )
    header = ["video", "decoding", "file (MB)", "windows", "windows/s", "vs whole file", "peak RSS (MB)"]
    return Table(
        f"{task.capitalize()}: one process per video and way, windows of 4 s, one clip each",
        [*header, "vs first (MB)", "vs whole file"],
        rows,
    )


def _growth(cases: dict[str, dict], first: str, longest: str) -> float:
    return cases[longest]["peak_rss_mb"] - cases[first]["peak_rss_mb"]


def _rate(case: dict) -> float:
    return case["windows"] / case["seconds"]
