"""Issue 14.5: what sharding costs against writing the same files into a tar, and where it goes.

The dataset is the one the earlier measurement used: synthetic 10-s 640x360 30-fps H.264 videos with
x264's default 250-frame GOP (`benchmarks.videos`), each written several times. `vidtx shard` of it
into each store with one process (plan, a probing child per shard, the tar, its sha256, the
manifest) is timed against `tarfile` adding the same files to one tar, interleaved. Where the time
goes: the probe of every video on its own (`vidtx.media.probe.probe_video`, in this process), and
the fixed start-up of a sharding job (one video).
"""

from __future__ import annotations

import itertools
import logging
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import interleaved
from benchmarks.videos import STORES, shard_store, tar_copy, write_busy_videos, write_copies
from vidtx.media.probe import probe_video

log = logging.getLogger(__name__)


def timed(write: Callable[[Path], object], outputs: itertools.count, work: Path) -> Callable[[], float]:
    def measure() -> float:
        output = work / f"out-{next(outputs)}"
        start = time.perf_counter()
        write(output)
        return time.perf_counter() - start

    return measure


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    distinct, copies, rounds = (2, 2, 1) if quick else (4, 12, 3)
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-sharding-") as tmp:
        work, counter = Path(tmp), itertools.count()
        videos = write_copies(write_busy_videos(work / "distinct", distinct), work / "data" / "busy", copies)
        write_copies(videos[:1], work / "one" / "busy", 1)
        candidates = {"tarfile": timed(lambda out: tar_copy(videos, out / "copy.tar"), counter, work)}
        for store in STORES:
            candidates[f"vidtx shard, {store}"] = timed(
                partial(shard_store, work / "data", store=store, processes=1), counter, work
            )
        candidates["vidtx shard, original, one video"] = timed(
            partial(shard_store, work / "one", store="original", processes=1), counter, work
        )
        log.info("sharding: %d videos, %d rounds", len(videos), rounds)
        seconds = interleaved(candidates, rounds)
        probe = interleaved({"probe": lambda: sum(_probe_seconds(v) for v in videos) / len(videos)}, rounds)
    tar = seconds["tarfile"].median / len(videos)
    rows = [
        [name, fmt(t.median), fmt(t.median / len(videos) / tar)]
        for name, t in seconds.items()
        if "one video" not in name
    ]
    fixed = seconds["vidtx shard, original, one video"].median
    original = seconds["vidtx shard, original"].median
    per_video = (original - fixed) / (len(videos) - 1)
    return BenchmarkResult(
        name="sharding",
        title="Sharding against tarfile",
        summary=" ".join(__doc__.split("\n\n", 1)[1].split())
        + f" {distinct} videos written {copies} times ({len(videos)} files); medians of {rounds} rounds.",
        inputs={"distinct": distinct, "copies": copies},
        tables=[
            Table(
                "Writing the files into shards or into one tar, one process",
                ["method", "seconds", "time per video × tarfile"],
                rows,
            )
        ],
        raw={"seconds": seconds, "probe_seconds_per_video": probe},
        notes=[
            f"Copying the videos (store original) costs {fmt(original / len(videos) / tar)}x tarfile per video over "
            f"{len(videos)} videos: {fmt(fixed)} s of fixed start-up (a sharding job of one video: plan, "
            f"process and prober start, manifest) and {fmt(per_video * 1000)} ms per further video, of which "
            f"the probe takes {fmt(probe['probe'].median * 1000)} ms (demux every packet, decode the first "
            f"frame and the last keyframe), against {fmt(tar * 1000)} ms to add the file to a tar.",
        ],
        quick=quick,
    )


def _probe_seconds(video: Path) -> float:
    data = video.read_bytes()
    start = time.perf_counter()
    probe_video(data)
    return time.perf_counter() - start
