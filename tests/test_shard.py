import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import decord
import numpy as np
import pytest
import webdataset as wds
from media import encode

from vidtx.config import ReencodeConfig, ShardConfig, SynthConfig
from vidtx.manifest import load_manifest
from vidtx.media.encode import encode_mp4
from vidtx.shard.plan import plan_shards
from vidtx.shard.synthetic import generate_dataset
from vidtx.shard.writer import ShardingError, write_shard
from vidtx.stages.shard import plan_dataset, shard_dataset


def members(tar: Path) -> dict[str, bytes]:
    with tarfile.open(tar) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers()}


def tar_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.tar"))}


def test_copy_mode_round_trip_manifest_and_tar_contents(synthetic_shards: tuple[Path, Path]) -> None:
    videos, shards = synthetic_shards
    manifest = load_manifest(shards, "train")
    assert manifest.num_samples == 24
    assert [s.samples for s in manifest.shards] == [5, 5, 5, 5, 4]
    assert manifest.class_names == ["growing", "moving_left", "moving_right", "shrinking"]
    assert manifest.counts_per_class == dict.fromkeys(manifest.class_names, 6)
    assert manifest.rejects == []
    assert manifest.config["max_samples_per_shard"] == 5
    for info, url in zip(manifest.shards, manifest.shard_urls(), strict=True):
        assert Path(url).stat().st_size == info.bytes
        assert hashlib.sha256(Path(url).read_bytes()).hexdigest() == info.sha256
    keys, sources = [], set()
    for sample in wds.DataPipeline(wds.SimpleShardList(manifest.shard_urls()), wds.tarfile_to_samples()):
        meta = json.loads(sample["json"])
        keys.append(sample["__key__"])
        sources.add(meta["source"])
        assert sample["mp4"] == (videos / meta["source"]).read_bytes()  # copied as they are
        assert manifest.class_names[meta["label"]] == meta["label_name"] == Path(meta["source"]).parts[1]
        assert (meta["frames"], meta["width"], meta["height"], meta["fps"]) == (8, 32, 32, 8.0)
        assert meta["duration"] == pytest.approx(1.0)
    assert keys[:6] == [
        "000000000000",
        "000000000001",
        "000000000002",
        "000000000003",
        "000000000004",
        "000001000000",
    ]
    assert len(sources) == 24
    labels_of_first_shard = {
        json.loads(m)["label"] for n, m in members(shards / "train-000000.tar").items() if n.endswith("json")
    }
    assert len(labels_of_first_shard) > 1  # shuffled before sharding: shards mix classes
    for info in members(shards / "train-000000.tar"):
        assert info.startswith("0000000000")
    with tarfile.open(shards / "val-000000.tar") as archive:
        assert {(m.mtime, m.uname, m.gname, m.mode) for m in archive.getmembers()} == {
            (0, "vidtx", "vidtx", 0o444)
        }


def test_same_seed_gives_byte_identical_shards_whatever_the_process_count(
    synthetic_shards: tuple[Path, Path], tmp_path: Path
) -> None:
    videos, reference = synthetic_shards
    source = videos / "annotations.csv"
    manifests = shard_dataset(
        ShardConfig(source=source, output=tmp_path / "a", max_samples_per_shard=5, processes=2)
    ).manifests
    assert tar_bytes(tmp_path / "a") == tar_bytes(reference)
    assert manifests["train"].content_hash == load_manifest(reference, "train").content_hash
    other = shard_dataset(
        ShardConfig(source=source, output=tmp_path / "b", max_samples_per_shard=5, processes=1, seed=1)
    ).manifests
    assert other["train"].content_hash != manifests["train"].content_hash
    assert other["train"].counts_per_class == manifests["train"].counts_per_class


def test_max_bytes_starts_new_shards(synthetic_shards: tuple[Path, Path]) -> None:
    videos, _ = synthetic_shards
    source = videos / "annotations.csv"
    by_count = plan_shards(ShardConfig(source=source, splits=["train"], max_samples_per_shard=1000))
    assert len(by_count) == 1
    by_bytes = plan_shards(ShardConfig(source=source, splits=["train"], max_bytes_per_shard=1_000_000))
    assert len(by_bytes) == 1  # ~24 x 5 KB
    huge = ShardConfig(source=source, splits=["train"], max_samples_per_shard=1000)
    sizes = [Path(item.path).stat().st_size for item in by_count[0].items]
    cap = sum(sizes[:3]) + 3 * 2048  # the first three videos plus their tar overhead
    assert cap < 1_000_000  # below the config minimum: check the packing with the plan function directly
    specs = plan_shards(huge.model_copy(update={"max_bytes_per_shard": cap}))
    assert len(specs[0].items) == 3
    assert sum(len(s.items) for s in specs) == 24


def test_bad_videos_are_rejected_with_reasons_and_the_rest_sharded(
    tmp_path: Path, write_mp4: Callable[..., Path]
) -> None:
    rows = []
    for index in range(6):
        write_mp4(tmp_path / f"good{index}.mp4")
        rows.append(f"good{index}.mp4,{'ab'[index % 2]}")
    good = (tmp_path / "good0.mp4").read_bytes()
    (tmp_path / "truncated.mp4").write_bytes(good[: len(good) // 2])
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a video at all\n" * 20)
    write_mp4(tmp_path / "short.mp4", num_frames=2)
    rows += ["truncated.mp4,a", "empty.mp4,b", "notes.txt,a", "short.mp4,b", "missing.mp4,a"]
    (tmp_path / "list.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    cfg = ShardConfig(
        source=tmp_path / "list.csv", output=tmp_path / "shards", processes=1, max_reject_fraction=0.5
    )

    manifest = shard_dataset(cfg).manifests["train"]
    assert manifest.num_samples == 6
    assert manifest.counts_per_class == {"a": 3, "b": 3}
    reasons = {reject.path: reject.reason for reject in manifest.rejects}
    assert reasons.keys() == {"truncated.mp4", "empty.mp4", "notes.txt", "short.mp4", "missing.mp4"}
    assert reasons["truncated.mp4"].startswith("not a readable video container")
    assert reasons["empty.mp4"] == "empty file"
    assert reasons["notes.txt"].startswith("not a readable video container")
    assert reasons["short.mp4"] == "too short: 2 frames < min_frames 4"
    assert reasons["missing.mp4"] == "missing: file not found"
    lines = (tmp_path / "shards/train.rejects.jsonl").read_text().splitlines()
    assert {json.loads(line)["path"] for line in lines} == reasons.keys()

    strict = cfg.model_copy(update={"output": tmp_path / "strict", "max_reject_fraction": 0.2})
    with pytest.raises(ShardingError, match="5 of 11 videos rejected"):
        shard_dataset(strict)
    assert (tmp_path / "strict/train.rejects.jsonl").is_file()
    assert not (tmp_path / "strict/train.manifest.json").exists()


def test_reencode_resizes_resamples_cuts_and_shortens_the_gop(
    tmp_path: Path, write_mp4: Callable[..., Path]
) -> None:
    write_mp4(tmp_path / "v.mp4", num_frames=24, width=64, height=48, fps=12)
    (tmp_path / "list.csv").write_text("path,label\nv.mp4,x\n")
    reencode = ReencodeConfig(short_side=32, fps=6, max_seconds=1.0, keyframe_interval=2)
    cfg = ShardConfig(
        source=tmp_path / "list.csv", output=tmp_path / "shards", processes=1, reencode=reencode
    )
    manifest = shard_dataset(cfg).manifests["train"]
    assert manifest.config["reencode"] == reencode.model_dump()
    sample = members(tmp_path / "shards/train-000000.tar")
    meta = json.loads(sample["000000000000.json"])
    assert (meta["width"], meta["height"], meta["frames"], meta["fps"]) == (42, 32, 6, 6.0)
    assert meta["reencoded"] is True
    reader = decord.VideoReader(io.BytesIO(sample["000000000000.mp4"]))
    assert (len(reader), reader.get_avg_fps()) == (6, 6.0)
    assert list(reader.get_key_indices()) == [0, 2, 4]


def test_rerun_skips_finished_shards_and_rewrites_damaged_ones(
    synthetic_shards: tuple[Path, Path], tmp_path: Path
) -> None:
    videos, _ = synthetic_shards
    cfg = ShardConfig(
        source=videos / "annotations.csv", output=tmp_path, max_samples_per_shard=5, processes=1
    )
    first = shard_dataset(cfg).manifests
    stamps = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.tar")}
    reference = tar_bytes(tmp_path)
    with (tmp_path / "train-000002.tar").open("ab") as file:
        file.write(b"damage")
    second = shard_dataset(cfg).manifests
    assert tar_bytes(tmp_path) == reference
    assert {name for name, stamp in stamps.items() if (tmp_path / name).stat().st_mtime_ns != stamp} == {
        "train-000002.tar"
    }
    assert second == first
    # What the shard flow reports as reused: every shard is now complete; the marker is unchanged.
    assert all(write_shard(spec, cfg).reused for spec in plan_dataset(cfg))
    assert not any("reused" in json.loads(marker.read_text()) for marker in tmp_path.glob("*.stats.json"))


def test_rerun_rebuilds_exactly_the_shards_whose_source_videos_changed(
    synthetic_shards: tuple[Path, Path], tmp_path: Path
) -> None:
    videos, _ = synthetic_shards
    shutil.copytree(videos, tmp_path / "videos")
    cfg = ShardConfig(
        source=tmp_path / "videos" / "annotations.csv",
        output=tmp_path / "shards",
        max_samples_per_shard=5,
        processes=1,
        splits=["train"],
    )
    shard_dataset(cfg)
    stamps = {p.name: p.stat().st_mtime_ns for p in cfg.output.glob("*.tar")}
    shard_dataset(cfg)  # nothing changed: nothing rewritten
    assert {p.name: p.stat().st_mtime_ns for p in cfg.output.glob("*.tar")} == stamps

    first, second = plan_shards(cfg)[:2]
    replaced, replacement = Path(second.items[0].path), Path(first.items[0].path)
    replaced.write_bytes(replacement.read_bytes())  # the source fixed or replaced in place
    shard_dataset(cfg)
    rewritten = {name for name, stamp in stamps.items() if (cfg.output / name).stat().st_mtime_ns != stamp}
    assert rewritten == {second.name}
    sample = members(cfg.output / second.name)[f"{second.items[0].key}.mp4"]
    assert sample == replacement.read_bytes()


@pytest.mark.slow
def test_a_killed_run_leaves_no_half_shard_and_the_rerun_is_byte_identical(tmp_path: Path) -> None:
    cfg = SynthConfig(
        output=tmp_path / "videos",
        classes=["moving_up", "moving_down"],
        videos_per_class={"train": 24},
        num_frames=32,
        size=64,
    )
    annotations = generate_dataset(cfg)
    options = [
        f"--set=shard.{option}"
        for option in (
            "max_samples_per_shard=2",
            "processes=1",
            "reencode.short_side=32",
            "reencode.keyframe_interval=4",
        )
    ]

    def shard_command(output: Path) -> list[str]:
        return [sys.executable, "-m", "vidtx", "shard", str(annotations), str(output), *options]

    clean = tmp_path / "clean"
    subprocess.run(shard_command(clean), check=True, capture_output=True, timeout=300)
    killed = tmp_path / "killed"
    process = subprocess.Popen(shard_command(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(killed.glob("*.stats.json")) and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = {p.name.replace(".stats.json", ".tar") for p in killed.glob("*.stats.json")}
    assert 0 < len(finished) < 24, "the run must be killed part-way"
    assert not (killed / "train.manifest.json").exists()
    for tar in killed.glob("*.tar"):  # every file under a final name is a complete shard
        assert len(members(tar)) == 4
    stamps = {name: (killed / name).stat().st_mtime_ns for name in finished}

    subprocess.run(shard_command(killed), check=True, capture_output=True, timeout=300)
    assert tar_bytes(killed) == tar_bytes(clean)
    assert len(tar_bytes(clean)) == 24
    assert all((killed / name).stat().st_mtime_ns == stamp for name, stamp in stamps.items())
    assert load_manifest(killed, "train").content_hash == load_manifest(clean, "train").content_hash
    assert not list(killed.glob("*.tmp"))


def test_cli_shard_and_inspect(synthetic_shards: tuple[Path, Path], tmp_path: Path, vidtx) -> None:
    videos, _ = synthetic_shards

    overrides = ["shard.format=folder", "shard.splits=[val]", "shard.processes=1"]
    result = vidtx("shard", str(videos), str(tmp_path), *(f"--set={override}" for override in overrides))
    assert result.returncode == 0, result.stderr
    assert "val: 12 samples in 1 shards, 0 rejected" in result.stdout
    assert load_manifest(tmp_path, "val").counts_per_class["growing"] == 3

    result = vidtx("inspect", str(tmp_path / "val.manifest.json"), "--videos", "2", "--frames", "4")
    assert result.returncode == 0, result.stderr
    assert "split val: 12 samples in 1 shards" in result.stdout
    assert "moving_left" in result.stdout
    assert (tmp_path / "val.contact.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    result = vidtx("shard", str(videos), str(tmp_path / "x"), "--set", "shard.format=nope")
    assert result.returncode != 0
    assert "shard.format" in result.stderr


def test_the_encoder_output_is_a_pure_function_of_its_input() -> None:
    """x264's macroblock-tree made ~3% of encodes of 64 px frames differ from run to run; sharding
    and synthesis rely on identical bytes, so encode_mp4 must not."""
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
    frames = [np.roll(base, 2 * t, axis=1) for t in range(16)]
    outputs = {encode_mp4(frames, 12, keyframe_interval=4) for _ in range(100)}
    assert len(outputs) == 1


def in_a_mount_namespace_with_a_full_disk(folder: Path) -> list[str]:
    """A command prefix that runs a command with `folder` on a 200 KB tmpfs mounted in a mount namespace
    of its own (gone with the command, nothing to unmount), listing what the command left there in
    `<folder>.left`; skips the test where no tmpfs can be mounted (no root, no user namespaces)."""
    unshare = ["unshare", "--mount", *(["--map-root-user"] if os.geteuid() != 0 else [])]
    mount = 'mount -t tmpfs -o size=200k tmpfs "$0"'
    folder.mkdir()
    if subprocess.run([*unshare, "sh", "-c", mount, str(folder)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root or user namespaces)")
    script = f'{mount} || exit 99; "$@"; code=$?; ls -A "$0" > "$0.left"; exit $code'
    return [*unshare, "sh", "-c", script, str(folder)]


@pytest.mark.parametrize("output_is", ["read_only", "on_a_full_disk"])
def test_an_output_that_cannot_be_written_is_one_line_and_leaves_no_temporary_file(
    tmp_path: Path, vidtx, file_permissions_apply: list[str], output_is: str
) -> None:
    """Was: a traceback (read-only), 3-5 tracebacks and a full-size `.tar.tmp` left (full disk)."""
    noise = np.random.default_rng(0).integers(0, 256, (24, 96, 96, 3), dtype=np.uint8)
    video = encode(noise)  # ~150 KB: noise does not compress
    (tmp_path / "videos").mkdir()
    for index in range(4):
        (tmp_path / f"videos/v{index}.mp4").write_bytes(video)
    (tmp_path / "videos/list.csv").write_text("path,label\n" + "".join(f"v{i}.mp4,a\n" for i in range(4)))
    output = tmp_path / "shards"
    arguments = [
        "shard",
        str(tmp_path / "videos/list.csv"),
        str(output),
        "--set=shard.max_samples_per_shard=1",
    ]
    if output_is == "read_only":
        output.mkdir(mode=0o555)
        result = vidtx(*arguments, prefix=file_permissions_apply)
        assert result.stderr.splitlines() == [f"error: {output}/ignored.jsonl: Permission denied"]
        assert list(output.iterdir()) == []
    else:
        result = vidtx(
            *arguments, "--set=shard.processes=2", prefix=in_a_mount_namespace_with_a_full_disk(output)
        )
        *written, error = result.stderr.splitlines()
        assert [line for line in written if " INFO " not in line] == []  # the shards that fitted
        assert re.fullmatch(
            rf"error: {output}/train-00000\d\.(tar|stats\.json): No space left on device", error
        )
        left = (tmp_path / "shards.left").read_text().split()
        assert "ignored.jsonl" in left  # listed after the command
        assert [name for name in left if name.endswith(".tmp")] == []
    assert result.returncode == 1
