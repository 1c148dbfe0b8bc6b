"""Bad shards and samples at load time: both loaders skip (and log) samples that fail to decode, decode
odd videos to the configured crop, read what is left of a damaged tar, and `vidtx inspect` reports damaged
shards instead of crashing (issue 10, point 1, data side).

The odd and bad videos are written by media.py; `bad_dataset` (conftest) is them sharded by `vidtx shard`.
"""

import json
import logging
import re
import shutil
import subprocess
import tarfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import webdataset as wds
from media import SHARDED, case_bytes, cut_in_video, good

from vidtx.config import DataConfig
from vidtx.data.eval_loader import build_eval_loader
from vidtx.data.shares import UnreadableShardsError, epoch_shards
from vidtx.data.train_loader import build_train_loader
from vidtx.manifest import Manifest, ShardInfo, content_hash, load_manifest

# --- the loaders: decode failures are skipped and logged, odd videos decode and crop ----------------


def loader_config(shards: Path) -> DataConfig:
    return DataConfig(
        shards=shards, num_frames=8, short_side=32, crop_size=28, num_workers=0, shuffle_buffer=4
    )


@pytest.mark.usefixtures("single_process")
def test_loaders_decode_odd_sizes_frame_rates_and_containers_to_the_configured_crop(
    bad_dataset: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    shards, _ = bad_dataset
    cfg = loader_config(shards)
    views = {}
    for batch, _, keys in build_eval_loader(cfg, "train", batch_size=4):
        views |= dict(zip(keys, batch, strict=True))
    assert sorted(views) == sorted([f"good{i}" for i in range(4)] + [Path(n).stem for n in SHARDED])
    for clip in views.values():
        assert clip.shape == (1, 8, 28, 28, 3)  # (views, T, H, W, C)
        assert clip.float().std() > 10
    five = views["five_frames"][0]  # 5 frames, padded to 8 by repeating frames
    assert len({five[t].numpy().tobytes() for t in range(8)}) == 5
    epoch = list(build_train_loader(cfg, batch_size=4, seed=0))
    assert len(epoch) == 3
    assert all(clips.shape == (4, 8, 28, 28, 3) for clips, *_ in epoch)


def write_shard_of_samples(folder: Path, samples: dict[str, dict[str, bytes]]) -> None:
    """A tar of the given members per key and its manifest (as `vidtx shard` would have written)."""
    folder.mkdir()
    with wds.TarWriter(str(folder / "train-000000.tar"), encoder=False) as writer:
        for key, members in samples.items():
            writer.write({"__key__": key, **members})
    tar = folder / "train-000000.tar"
    shard = ShardInfo(name=tar.name, samples=len(samples), bytes=tar.stat().st_size, sha256="")
    Manifest(
        split="train",
        shards=[shard],
        num_samples=len(samples),
        class_names=["a"],
        counts_per_class={"a": len(samples)},
        rejects=[],
        config={},
        content_hash=content_hash([shard], ["a"]),
    ).save(folder)


def meta(source: str, width: int = 64, height: int = 48) -> bytes:
    fields = {"label": 0, "label_name": "a", "key": Path(source).stem, "source": source}
    return json.dumps(fields | {"width": width, "height": height, "frames": 12, "fps": 12.0}).encode()


@pytest.mark.usefixtures("single_process")
def test_samples_that_fail_to_decode_are_skipped_and_logged_by_both_loaders(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = {
        "corrupt": (case_bytes("corrupt.mp4"), "cannot decode frames"),
        "truncated": (case_bytes("truncated.mp4"), "cannot open the video"),
        "zero_bytes": (b"", "cannot open the video"),
        "text": (case_bytes("notes.txt"), "cannot open the video"),
        "audio_only": (case_bytes("audio_only.mp4"), "cannot open the video"),
    }
    samples = {"000000000000": {"mp4": good(), "json": meta("good-1.mp4")}}
    for index, (name, (data, _)) in enumerate(bad.items(), start=1):
        samples[f"{index:012d}"] = {"mp4": data, "json": meta(f"{name}.mp4")}
    samples["000000000006"] = {"json": meta("no_video.mp4")}
    samples["000000000007"] = {"mp4": good(), "json": b"{not json"}
    samples["000000000008"] = {"mp4": good(), "json": meta("good-2.mp4")}
    write_shard_of_samples(tmp_path / "shards", samples)
    cfg = loader_config(tmp_path / "shards")
    with caplog.at_level(logging.WARNING, logger="vidtx.data"):
        keys = [key for _, _, batch in build_eval_loader(cfg, "train", batch_size=2) for key in batch]
        train = list(build_train_loader(cfg, batch_size=1, seed=0))
    assert keys == ["good-1", "good-2"]
    assert len(train) == 9  # an epoch is num_samples / batch size batches, drawn from the good two
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping evaluation")]
    url = tmp_path / "shards/train-000000.tar"
    for index, (name, (_, reason)) in enumerate(bad.items(), start=1):
        line = next(m for m in skipped if f"{url}:{index:012d} ({name}.mp4): " in m)
        assert reason in line
    assert any(f"{url}:000000000006 (no_video.mp4): no video member among ['json']" in m for m in skipped)
    assert any(f"{url}:000000000007: Expecting property name" in m for m in skipped)
    assert len(skipped) == 7
    assert any(m.startswith("skipping training sample") for m in (r.getMessage() for r in caplog.records))


# --- a shard folder with a damaged tar -------------------------------------------------------------


@pytest.fixture
def damaged_shards(synthetic_shards: tuple[Path, Path], tmp_path: Path) -> Path:
    """A copy of the synthetic shards (5 + 5 + 5 + 5 + 4 train samples) with train-000001.tar cut
    in the middle of its third sample and one byte of train-000003.tar flipped."""
    _, shards = synthetic_shards
    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    cut_in_video(copy / "train-000001.tar", 2)
    flipped = copy / "train-000003.tar"
    data = bytearray(flipped.read_bytes())
    data[-1] ^= 0xFF  # after the end-of-archive block: the tar still reads
    flipped.write_bytes(bytes(data))
    return copy


@pytest.mark.usefixtures("single_process")
def test_loaders_read_what_is_left_of_a_truncated_tar_and_log_the_rest(
    damaged_shards: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = loader_config(damaged_shards).model_copy(update={"num_frames": 4})
    with caplog.at_level(logging.WARNING, logger="vidtx.data"):
        keys = [key for _, _, batch in build_eval_loader(cfg, "train", batch_size=4) for key in batch]
        epoch = list(build_train_loader(cfg, batch_size=4, seed=0))
    assert len(keys) == 24 - 3  # the truncated shard keeps its first two samples
    assert len(epoch) == 6  # a whole epoch: training goes on, resampling the readable data
    assert all(clips.shape == (4, 4, 28, 28, 3) for clips, *_ in epoch)
    messages = [r.getMessage() for r in caplog.records]
    size = (damaged_shards / "train-000001.tar").stat().st_size
    damaged = f"split train: damaged shard train-000001.tar: {size} bytes, the manifest says"
    assert sum(m.startswith(damaged) for m in messages) == 1  # when the train loader is built
    unreadable = [m for m in messages if "unreadable shard data" in m]
    assert unreadable
    assert all("ReadError" in m and "train-000001.tar" in m for m in unreadable)


@pytest.mark.timeout(60)  # it used to wait for a first batch forever
def test_a_rank_whose_shards_yield_no_sample_fails_naming_them_with_one_warning(
    damaged_shards: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27 case 4: with 5 ranks each reads one shard; the rank dealt train-000002.tar, cut in its
    first video, has nothing to read (was: no batch in 60 s and 630k warning lines)."""
    cut_in_video(damaged_shards / "train-000002.tar", 0)
    urls = load_manifest(damaged_shards, "train").shard_urls()
    (rank,) = [r for r in range(5) if epoch_shards(urls, 0, 0, r, 5) == [urls[2]]]
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "5")
    loader = build_train_loader(loader_config(damaged_shards), batch_size=4, seed=0)
    message = (
        f"rank {rank}: not one clip could be read from its shards train-000002.tar in {damaged_shards} "
        "(damaged: `vidtx inspect` checks them)"
    )
    with (
        caplog.at_level(logging.WARNING, logger="vidtx.data"),
        pytest.raises(UnreadableShardsError) as raised,
    ):
        next(iter(loader))
    assert str(raised.value) == message
    unreadable = [r.getMessage() for r in caplog.records if "unreadable shard data" in r.getMessage()]
    assert len(unreadable) == 1
    assert "train-000002.tar" in unreadable[0]


def cut_positions(tar: Path) -> dict[str, int]:
    """Where to cut a tar of one sample (json, then mp4 member) so that nothing of it decodes."""
    with tarfile.open(tar) as archive:
        json_member, video = archive.getmembers()[:2]
    return {
        "in the first header": 100,
        "in the json member": json_member.offset_data + json_member.size // 2,
        "between the members": video.offset,  # the json whole, then the end of the file
        "in the video's header": video.offset + 476,  # issue 43's 1,500 bytes
        "in the video member": video.offset_data + video.size // 2,
    }


@pytest.mark.timeout(60)  # it used to spin forever, logging the same sample 10,000 times a second
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "cut",
    ["in the first header", "in the json member", "between the members", "in the video's header", "in the video member"],
)  # fmt: skip
def test_a_pass_over_a_rank_s_shards_that_gives_no_clip_fails_naming_them_wherever_the_cut_falls(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, cut: str, workers: int
) -> None:
    """Issue 43 case 2: a train split of one shard cut inside its first sample. A pass that reads a
    sample which cannot decode (the json alone) gave no clip: that is the error, not the samples read."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    write_shard_of_samples(tmp_path / "shards", {"000000000000": {"mp4": good(), "json": meta("good-1.mp4")}})
    tar = tmp_path / "shards/train-000000.tar"
    tar.write_bytes(tar.read_bytes()[: cut_positions(tar)[cut]])
    cfg = loader_config(tmp_path / "shards").model_copy(update={"num_workers": workers})
    message = (
        r"rank 0(, DataLoader worker [01])?: not one clip could be read from its shards train-000000\.tar "
        + re.escape(f"in {tmp_path / 'shards'} (damaged: `vidtx inspect` checks them)")
    )
    with (
        caplog.at_level(logging.WARNING, logger="vidtx.data"),
        pytest.raises(UnreadableShardsError) as raised,
    ):
        next(iter(build_train_loader(cfg, batch_size=1, seed=0)))
    assert re.fullmatch(message, str(raised.value))  # one line, from a DataLoader worker too
    warnings = Counter(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert all(count == 1 for count in warnings.values()), warnings  # once each, not once per pass


def test_a_train_loader_without_any_shard_file_fails_instead_of_waiting_forever(
    damaged_shards: Path,
) -> None:
    for tar in damaged_shards.glob("train-*.tar"):
        tar.unlink()
    with pytest.raises(FileNotFoundError, match="none of the 5 'train' shards exists"):
        build_train_loader(loader_config(damaged_shards), batch_size=4, seed=0)


def test_vidtx_inspect_reports_damaged_shards_instead_of_crashing(
    damaged_shards: Path, vidtx: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    result = vidtx("inspect", str(damaged_shards), "--split", "train", "--videos", "8", "--frames", "4")
    assert result.returncode == 1
    assert "split train: 24 samples in 5 shards" in result.stdout
    size = (damaged_shards / "train-000001.tar").stat().st_size
    assert f"  damaged: train-000001.tar: {size} bytes, the manifest says " in result.stdout
    assert "  damaged: train-000003.tar: sha256 mismatch against the manifest" in result.stdout
    assert "train-000000.tar" not in result.stdout
    assert (damaged_shards / "train.contact.png").is_file()  # drawn from the readable samples
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: 2 damaged shard(s) in {damaged_shards}: run `vidtx shard` again to rewrite them"
    )
    assert "Traceback" not in result.stderr
