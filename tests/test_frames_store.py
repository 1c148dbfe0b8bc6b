"""The frames store: videos sharded as JPEG frames, read back by the same loaders as the video store."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from vidtx.config import DataConfig, ShardConfig
from vidtx.data.eval_loader import build_eval_loader
from vidtx.data.train_loader import build_train_loader
from vidtx.eval.multiview import evaluate
from vidtx.manifest import FRAMES_MEMBER, load_manifest
from vidtx.media.frames import JpegFrames
from vidtx.stages.shard import shard_dataset
from vidtx.stages.trained_model import load_trained_model


def decoded(path: Path) -> np.ndarray:
    """Every frame of a video file, as PyAV decodes it: uint8 (T, H, W, 3)."""
    with av.open(str(path)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])


def samples(tar: Path) -> dict[str, dict[str, bytes]]:
    with tarfile.open(tar) as archive:
        members = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
    by_key: dict[str, dict[str, bytes]] = {}
    for name, data in members.items():
        key, _, extension = name.partition(".")
        by_key.setdefault(key, {})[extension] = data
    return by_key


@pytest.fixture
def one_video(tmp_path: Path, write_mp4: Callable[..., Path]) -> tuple[Path, Path]:
    """A 24-frame 12-fps 64x48 MP4 listed in a CSV: (annotations, video)."""
    video = write_mp4(tmp_path / "videos/clip.mp4", num_frames=24, width=64, height=48, fps=12.0)
    (tmp_path / "videos/list.csv").write_text("path,label\nclip.mp4,a\n")
    return tmp_path / "videos/list.csv", video


def frames_config(annotations: Path, output: Path, **fields: object) -> ShardConfig:
    return ShardConfig(source=annotations, output=output, store="frames", processes=1, **fields)


def test_a_sample_holds_every_frame_as_jpeg_within_jpeg_tolerance(
    one_video: tuple[Path, Path], tmp_path: Path
) -> None:
    annotations, video = one_video
    manifest = shard_dataset(frames_config(annotations, tmp_path / "shards", short_side=48)).manifests[
        "train"
    ]
    assert manifest.store == "frames"
    (sample,) = samples(tmp_path / "shards" / manifest.shards[0].name).values()
    assert set(sample) == {FRAMES_MEMBER, "json"}
    meta = json.loads(sample["json"])
    assert (meta["frames"], meta["fps"], meta["width"], meta["height"], meta["store"]) == (
        24,
        12.0,
        64,
        48,
        "frames",
    )
    assert len(meta["offsets"]) == 25
    assert meta["offsets"][-1] == len(sample[FRAMES_MEMBER])
    source = decoded(video)
    frames = JpegFrames(sample[FRAMES_MEMBER], meta["offsets"], meta["fps"]).frames(range(24))
    assert frames.shape == source.shape == (24, 48, 64, 3)
    error = np.abs(frames.astype(np.int16) - source.astype(np.int16))
    assert error.mean() < 3.0  # JPEG at quality 90 of a smooth ramp
    assert error.max() < 64


def test_frames_are_resampled_to_the_configured_rate_and_size(
    one_video: tuple[Path, Path], tmp_path: Path
) -> None:
    annotations, video = one_video
    cfg = frames_config(annotations, tmp_path / "shards", fps=6.0, short_side=24)
    manifest = shard_dataset(cfg).manifests["train"]
    (sample,) = samples(tmp_path / "shards" / manifest.shards[0].name).values()
    meta = json.loads(sample["json"])
    assert (meta["frames"], meta["fps"], meta["width"], meta["height"]) == (12, 6.0, 32, 24)
    store = JpegFrames(sample[FRAMES_MEMBER], meta["offsets"], meta["fps"])
    source = torch.from_numpy(decoded(video)).permute(0, 3, 1, 2).float()  # (T, C, H, W)
    small = torch.nn.functional.interpolate(source, size=(24, 32), mode="bilinear", antialias=True)
    for index in (0, 5, 11):  # stored frame i shows source frame 2i
        stored = torch.from_numpy(store.frames([index])[0]).permute(2, 0, 1).float()
        errors = [(stored - small[s]).abs().mean().item() for s in range(24)]
        assert int(np.argmin(errors)) == 2 * index


def test_decoding_at_a_smaller_size_uses_the_jpeg_scales(
    one_video: tuple[Path, Path], tmp_path: Path
) -> None:
    annotations, _ = one_video
    manifest = shard_dataset(frames_config(annotations, tmp_path / "shards", short_side=48)).manifests[
        "train"
    ]
    (sample,) = samples(tmp_path / "shards" / manifest.shards[0].name).values()
    meta = json.loads(sample["json"])
    full = JpegFrames(sample[FRAMES_MEMBER], meta["offsets"], 12.0).frames([3, 3, 7])
    assert np.array_equal(full[0], full[1])  # a repeated index repeats the frame
    exact = JpegFrames(sample[FRAMES_MEMBER], meta["offsets"], 12.0, size=(40, 30)).frames([3])
    assert exact.shape == (1, 30, 40, 3)
    at_least = JpegFrames(sample[FRAMES_MEMBER], meta["offsets"], 12.0, size=(30, 22), at_least=True)
    assert at_least.frames([3]).shape == (1, 24, 32, 3)  # the 1/2 DCT scale covers 30x22


def test_both_loaders_read_the_frames_store(frames_shards: Path, synthetic_shards: tuple[Path, Path]) -> None:
    _, video_shards = synthetic_shards
    cfg = DataConfig(
        shards=frames_shards, num_frames=4, short_side=32, crop_size=28, num_workers=0, repeated_sampling=2
    )
    epoch = list(build_train_loader(cfg, batch_size=4, seed=0))
    assert len(epoch) == 6  # an epoch: 24 train videos / 4 per batch (2 clips of each decoded video)
    assert all(clips.shape == (4, 4, 28, 28, 3) and clips.dtype == torch.uint8 for clips, *_ in epoch)
    views = {}
    for store in (frames_shards, video_shards):
        batches = build_eval_loader(
            cfg.model_copy(update={"shards": store, "crop_size": 32}), "val", batch_size=4, num_crops=3
        )
        views[store] = {
            key: clip for batch, _, keys in batches for key, clip in zip(keys, batch, strict=True)
        }
    assert views[frames_shards].keys() == views[video_shards].keys()
    for key, clip in views[frames_shards].items():
        assert clip.shape == (3, 4, 32, 32, 3)
        assert (clip.float() - views[video_shards][key].float()).abs().mean() < 8.0  # JPEG vs H.264 of 32 px


def test_inspect_shows_a_frames_store(frames_shards: Path, vidtx) -> None:
    result = vidtx("inspect", str(frames_shards), "--split", "val", "--videos", "2", "--frames", "4")
    assert result.returncode == 0, result.stderr
    assert "shards intact" in result.stdout
    assert (frames_shards / "val.contact.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_multi_view_evaluation_agrees_across_stores(trained_run: tuple, frames_shards: Path) -> None:
    config, result = trained_run
    model = load_trained_model(config, result.checkpoint)
    eval_cfg = config.eval.model_copy(update={"split": "val", "num_clips": 2, "num_crops": 3})
    by_store = {}
    for store in (config.data.shards, frames_shards):
        data = config.data.model_copy(update={"shards": store})
        by_store[store] = evaluate(model, load_manifest(store, "val"), data, eval_cfg)
    video, frames = by_store.values()
    assert video.num_videos == frames.num_videos == 12
    assert abs(video.metrics()["top1"] - frames.metrics()["top1"]) <= 1 / 12 + 1e-9  # at most one video
    assert abs(video.loss - frames.loss) < 0.1


def test_the_frames_store_takes_no_reencode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reencode applies to store 'video'"):
        ShardConfig(store="frames", reencode={"short_side": 128})
