"""Issue 60 point 2: a long video scored window by window, against its length.

Videos of 1, 10 and 60 minutes (generated: 64x48 noise at 8 fps, H.264) are scored by the demo's
X-ViT (xvit_tiny, untrained: the cost does not depend on the weights) with windows of 4 s every 4 s
(`VideoClassifier.classify_windows`: each window's one centre view decoded on its own), each in a
fresh process so that its peak resident memory (`ru_maxrss`) is its own. Reported: windows scored per
second and the peak RSS, each against the 1-minute video's. Only one window's frames are decoded at
a time, and the file is never held in memory (opened by its path, probed as it is demuxed: before,
it was held three times, by the bytes read, the probe's list of packets and decord's copy, and the
peak was 419 / 457 / 701 MB). What still grows with the length is decord's own memory: a reader keeps
the packets after the point it started decoding from, about the rest of the encoded file (+41-44 MB
for a 39 MB file read from its start; measured apart from this benchmark).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.results import BenchmarkResult, Table, fmt
from vidtx.media.encode import encode_mp4

log = logging.getLogger(__name__)

MINUTES = (1, 10, 60)
QUICK_MINUTES = (0.25, 1)
FPS, WIDTH, HEIGHT, WINDOW = 8, 64, 48, 4.0
DEMO = Path(__file__).resolve().parent.parent / "configs/experiments/demo.yaml"
# run in a fresh interpreter: the classifier scores one video window by window and prints its figures
SCORE = f"""
import json, resource, sys, time, torch
from vidtx.config import load_config
from vidtx.model_factory import model_for
from vidtx.serving.classifier import VideoClassifier
torch.set_num_threads(1)
config = load_config({str(DEMO)!r}, ["eval.num_clips=1", "eval.num_crops=1"])
classifier = VideoClassifier.of(model_for(config, num_classes=8), config, [str(i) for i in range(8)])
started = time.perf_counter()
rows = classifier.classify_windows(sys.argv[1], window={WINDOW}, hop={WINDOW}, top_k=1, num_clips=1, num_crops=1)
seconds = time.perf_counter() - started
assert all(row.error is None for row in rows), rows[:3]
print(json.dumps({{"windows": len(rows) - 1, "seconds": seconds,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def write_video(path: Path, minutes: float) -> int:
    """Noise frames at 8 fps for `minutes` (made whole: 265 MB for an hour, in this process, not in
    the measured one); the file's size."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (int(minutes * 60 * FPS), HEIGHT, WIDTH, 3), dtype=np.uint8)
    path.write_bytes(encode_mp4(frames, fps=FPS))
    return path.stat().st_size


def measure(path: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SCORE, str(path)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    lengths = QUICK_MINUTES if quick else MINUTES
    raw, rows = {}, []
    with tempfile.TemporaryDirectory() as folder:
        for minutes in lengths:
            video = Path(folder) / f"{minutes}min.mp4"
            size = write_video(video, minutes)
            log.info("scoring a %g-minute video window by window", minutes)
            case = raw[f"{minutes:g} min"] = measure(video) | {"file_mb": size / 1e6}
            video.unlink()
    base = raw[f"{lengths[0]:g} min"]
    for label, case in raw.items():
        rate = case["windows"] / case["seconds"]
        rows.append(
            [
                label,
                fmt(case["file_mb"]),
                str(case["windows"]),
                fmt(rate),
                f"{fmt(rate / (base['windows'] / base['seconds']), 2)}x",
                fmt(case["peak_rss_mb"]),
                f"{fmt(case['peak_rss_mb'] / base['peak_rss_mb'], 2)}x",
            ]
        )
    longest = raw[f"{lengths[-1]:g} min"]
    notes = [
        f"From {lengths[0]:g} to {lengths[-1]:g} minutes the peak RSS goes from {fmt(base['peak_rss_mb'])} to "
        f"{fmt(longest['peak_rss_mb'])} MB ({fmt(longest['peak_rss_mb'] / base['peak_rss_mb'], 2)}x) while the "
        f"video is {fmt(lengths[-1] / lengths[0], 2)}x as long; the file itself is {fmt(longest['file_mb'])} MB.",
    ]
    return BenchmarkResult(
        name="long_videos",
        title="Long videos window by window: throughput and peak memory against length",
        summary=(__doc__ or "").strip(),
        inputs={"minutes": lengths, "fps": FPS, "size": [WIDTH, HEIGHT], "window_s": WINDOW, "threads": 1},
        tables=[
            Table(
                "One process per video, windows of 4 s, one view each",
                ["video", "file (MB)", "windows", "windows/s", "vs first", "peak RSS (MB)", "vs first"],
                rows,
            )
        ],
        raw=raw,
        notes=notes,
        quick=quick,
    )
