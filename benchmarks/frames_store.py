"""Issue 14.3: how the frames store keeps and decodes JPEG frames, chosen by measurement.

Layout: one tar member per frame, or one packed member with an index? The frames store of 10-s
640x360 30-fps videos (300 JPEG frames a sample, short side 256, quality 90) is written both ways
from the same JPEGs: packed (what `vidtx shard --set shard.store=frames` writes: one `frames`
member, offsets in the json) and one `<key>.<index>.jpg` member per frame. Reading a sample the way
the loaders do (`tarfile` in random-access mode over the shard, every member header parsed, the
json read, then the 8 sampled JPEGs read) is timed per sample for both layouts, interleaved.

Decoder: the 8 sampled JPEGs of every sample decoded to RGB by Pillow (libjpeg-turbo through PIL's
plugin), by Pillow in draft mode at half size (its only scaled decode: 1/2, 1/4, 1/8), and by
simplejpeg (libjpeg-turbo's TurboJPEG API) at full and at half size, interleaved, ms per 8-frame clip.
"""

from __future__ import annotations

import io
import itertools
import json
import tarfile
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import simplejpeg
from PIL import Image

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import interleaved
from benchmarks.videos import shard_store, write_busy_videos
from vidtx.clips.sampling import FrameSampler
from vidtx.manifest import FRAMES_MEMBER

SAMPLED = 8


def per_frame_copy(packed: Path, output: Path) -> Path:
    """The tar `packed` rewritten with one member per JPEG frame (and the json without offsets)."""
    with tarfile.open(packed) as source, tarfile.open(output, "w") as target:
        members = {m.name: source.extractfile(m).read() for m in source.getmembers()}  # type: ignore[union-attr]
        for name in sorted(name for name in members if name.endswith(".json")):
            key = name.removesuffix(".json")
            meta = json.loads(members[name])
            offsets, frames = meta.pop("offsets"), members[f"{key}.{FRAMES_MEMBER}"]
            files = {f"{key}.json": json.dumps(meta).encode()}
            files |= {
                f"{key}.{i:05d}.jpg": frames[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)
            }
            for member, data in files.items():
                info = tarfile.TarInfo(member)
                info.size = len(data)
                target.addfile(info, io.BytesIO(data))
    return output


def read_packed(tar: Path) -> int:
    """Samples read: json, then the sampled frames' byte ranges of the packed member."""
    sampler, samples = FrameSampler("segment", SAMPLED), 0
    with tarfile.open(tar, "r:") as archive, tar.open("rb") as file:
        members = {info.name: info for info in archive}
        for name in (n for n in members if n.endswith(".json")):
            offsets = json.loads(archive.extractfile(members[name]).read())["offsets"]  # type: ignore[union-attr]
            start = members[name.removesuffix(".json") + f".{FRAMES_MEMBER}"].offset_data
            for index in sampler.test(len(offsets) - 1)[0]:
                file.seek(start + offsets[index])
                file.read(offsets[index + 1] - offsets[index])
            samples += 1
    return samples


def read_per_frame(tar: Path) -> int:
    """Samples read: json, then the sampled frames' members."""
    sampler, samples = FrameSampler("segment", SAMPLED), 0
    with tarfile.open(tar, "r:") as archive:
        members = {info.name: info for info in archive}
        for name in (n for n in members if n.endswith(".json")):
            key = name.removesuffix(".json")
            json.loads(archive.extractfile(members[name]).read())  # type: ignore[union-attr]
            frames = sorted(n for n in members if n.startswith(f"{key}.") and n.endswith(".jpg"))
            for index in sampler.test(len(frames))[0]:
                archive.extractfile(members[frames[index]]).read()  # type: ignore[union-attr]
            samples += 1
    return samples


def sampled_jpegs(tar: Path) -> list[list[bytes]]:
    """The 8 sampled JPEGs of every sample of a packed tar."""
    sampler, clips = FrameSampler("segment", SAMPLED), []
    with tarfile.open(tar) as archive:
        members = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
    for name in (n for n in members if n.endswith(".json")):
        offsets = json.loads(members[name])["offsets"]
        frames = members[name.removesuffix(".json") + f".{FRAMES_MEMBER}"]
        clips.append([frames[offsets[i] : offsets[i + 1]] for i in sampler.test(len(offsets) - 1)[0]])
    return clips


def pillow(jpeg: bytes, half: bool) -> np.ndarray:
    image = Image.open(io.BytesIO(jpeg))
    if half:
        image.draft("RGB", (image.width // 2, image.height // 2))
    return np.asarray(image.convert("RGB"))


def turbojpeg(jpeg: bytes, half: bool) -> np.ndarray:
    width, height = (0, 0)
    if half:
        height, width = (side // 2 for side in simplejpeg.decode_jpeg_header(jpeg)[:2])
    return simplejpeg.decode_jpeg(jpeg, colorspace="RGB", min_width=width, min_height=height)


def ms_per_clip(clips: list[list[bytes]], decode: object, half: bool) -> float:
    start = time.perf_counter()
    for jpeg in itertools.chain.from_iterable(clips):
        decode(jpeg, half)  # type: ignore[operator]
    return (time.perf_counter() - start) / len(clips) * 1000


def member_count(tar: Path) -> int:
    with tarfile.open(tar) as archive:
        return len(archive.getnames())


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    videos, rounds = (2, 3) if quick else (4, 7)
    with tempfile.TemporaryDirectory(prefix="vidtx-bench-layout-") as tmp:
        work = Path(tmp)
        write_busy_videos(work / "videos" / "busy", videos)
        shards = shard_store(work / "videos", work / "packed", "frames")
        packed = sorted(shards.glob("train-*.tar"))
        per_frame = [per_frame_copy(tar, work / f"per-frame-{tar.name}") for tar in packed]

        def seconds_per_sample(tars: list[Path], read: object) -> float:
            start = time.perf_counter()
            samples = sum(read(tar) for tar in tars)  # type: ignore[operator]
            return (time.perf_counter() - start) / samples

        timed = interleaved(
            {
                "packed": lambda: seconds_per_sample(packed, read_packed),
                "per frame": lambda: seconds_per_sample(per_frame, read_per_frame),
            },
            rounds,
        )
        members = {
            layout: sum(member_count(tar) for tar in tars) / sum(read(tar) for tar in tars)
            for layout, tars, read in (
                ("packed", packed, read_packed),
                ("per frame", per_frame, read_per_frame),
            )
        }
        clips = [clip for tar in packed for clip in sampled_jpegs(tar)]
        decoders = interleaved(
            {
                f"{name}, {'half' if half else 'full'} size": partial(ms_per_clip, clips, decode, half)
                for (name, decode), half in itertools.product(
                    (("Pillow", pillow), ("simplejpeg", turbojpeg)), (False, True)
                )
            },
            rounds,
        )
    rows = [[layout, fmt(members[layout]), fmt(t.median * 1000)] for layout, t in timed.items()]
    ratio = timed["per frame"].median / timed["packed"].median
    pillow_full, turbo_full = decoders["Pillow, full size"].median, decoders["simplejpeg, full size"].median
    return BenchmarkResult(
        name="frames_store",
        title="Frames store: packed member against one member per frame, and the JPEG decoder",
        summary=" ".join(__doc__.split("\n\n", 1)[1].split())
        + f" {videos} videos; medians of {rounds} rounds.",
        inputs={"videos": videos, "sampled_frames": SAMPLED},
        tables=[
            Table(
                "Reading a sample's json and 8 sampled JPEGs",
                ["layout", "members per sample", "ms per sample"],
                rows,
            ),
            Table(
                "Decoding the 8 sampled JPEGs of a clip (256 px short side, quality 90), one thread",
                ["decoder", "ms per clip", "× simplejpeg at full size"],
                [[name, fmt(t.median), fmt(t.median / turbo_full, 2)] for name, t in decoders.items()],
            ),
        ],
        raw={"seconds_per_sample": timed, "decode_ms_per_clip": decoders},
        notes=[
            f"One member per frame costs {fmt(ratio, 2)}x the packed member per sample: every member header "
            "is parsed by tarfile in Python whether its frame is sampled or not.",
            f"simplejpeg decodes a clip's frames {fmt(pillow_full / turbo_full, 2)}x as fast as Pillow at full size; "
            "it also decodes at any k/8 scale and into a given buffer, which Pillow's draft mode (powers of 2) "
            "and its image objects do not.",
        ],
        quick=quick,
    )
