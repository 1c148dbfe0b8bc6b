"""Datasets whose videos and annotations are in a bucket: listed there (the layouts read as on disk),
fingerprinted by each object's size and modification time, and downloaded only by the process that
writes a shard, once per video. Against the tests' S3 server (SeaweedFS on 127.0.0.1)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.local.latency_proxy import requests
from vidtx import storage
from vidtx.config import DatasetFormat, ShardConfig
from vidtx.locations import Location
from vidtx.manifest import load_manifest
from vidtx.shard.sources import Source, read_source
from vidtx.shard.writer import write_shard
from vidtx.stages.shard import plan_dataset, shard_dataset


def video_gets(log: Path, since: int) -> list[str]:
    return [r for r in requests(log, since) if r.startswith("GET ") and r.endswith((".mp4", ".webm"))]


def test_a_dataset_in_a_bucket_shards_as_on_disk_downloading_each_video_once(
    synthetic_shards: tuple[Path, Path],
    bucket: str,
    s3_log: Path,
    write_mp4: Callable[..., Path],
    tmp_path: Path,
) -> None:
    videos, local_shards = synthetic_shards
    storage.upload(videos, f"{bucket}/videos")
    config = ShardConfig(
        source=f"{bucket}/videos/annotations.csv", output=f"{bucket}/shards", max_samples_per_shard=5
    )
    since = s3_log.stat().st_size
    specs = plan_dataset(config)
    assert video_gets(s3_log, since) == []  # planning lists the bucket; it reads no video
    shard_dataset(config)
    gets = video_gets(s3_log, since)
    assert len(gets) == len(set(gets)) == sum(len(spec.items) for spec in specs)
    for split in ("train", "val"):  # the same samples as the disk's shards, sources recorded alike
        assert (
            load_manifest(config.output, split).content_hash
            == load_manifest(local_shards, split).content_hash
        )

    since = s3_log.stat().st_size
    assert all(write_shard(spec, config).reused for spec in specs)
    assert video_gets(s3_log, since) == []  # a re-run compares sizes and times from listings

    replaced = specs[0].items[0]
    time.sleep(1.1)  # S3 keeps modification times in whole seconds
    storage.upload(write_mp4(tmp_path / "other.mp4", num_frames=10, width=32, height=32), replaced.path)
    assert [write_shard(spec, config).reused for spec in specs] == [False] + [True] * (len(specs) - 1)


def write_layout(root: Path, format: DatasetFormat) -> Path:
    """A small dataset of `format` under `root` (the videos' bytes are never decoded by reading
    it): hidden files, a stray file, a missing video, a path outside the root. Returns its source."""
    for name in (
        "train/cat/a.mp4",
        "train/dog/b.mp4",
        "val/cat/c.mp4",
        "train/cat/.thumbs/t.mp4",
        "notes.txt",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"video" if name.endswith(".mp4") else b"text")
    if format == "folder":
        return root
    if format == "csv":
        rows = [
            "path,label,split",
            "train/cat/a.mp4,cat,train",
            "val/cat/c.mp4,cat,val",
            "../x.mp4,dog,train",
        ]
        (root / "annotations.csv").write_text("\n".join([*rows, "train/dog/gone.mp4,dog,train"]) + "\n")
        return root / "annotations.csv"
    if format == "kinetics":
        (root / "train" / "cat" / "yt1_000001_000011.mp4").write_bytes(b"video")
        rows = [
            "label,youtube_id,time_start,time_end,split",
            "cat,yt1,1,11,train",
            "dog,yt2,0,10,train",
            "dog,yt3,x,10,train",
        ]
        (root / "lists").mkdir()
        (root / "lists" / "train.csv").write_text("\n".join(rows) + "\n")
        return root / "lists"
    (root / "something-something-v2-labels.json").write_text(
        json.dumps({"Pushing [x]": "0", "Moving [y]": "1"})
    )
    (root / "train" / "a1.webm").write_bytes(b"video")
    entries = [{"id": "a1", "template": "Pushing [x]"}, {"id": "../../x", "template": "Moving [y]"}]
    (root / "something-something-v2-train.json").write_text(json.dumps(entries))
    (root / "something-something-v2-validation.json").write_text(
        json.dumps([{"id": "v9", "template": "Moving [y]"}])
    )
    return root


def summary(source: Source, root: Location) -> list[tuple[object, ...]]:
    """What a dataset read is, with the place it was read from written as ROOT."""

    def here(text: object) -> object:
        return str(text).replace(str(root), "ROOT") if text is not None else None

    records = [
        (r.key, r.label, r.split, storage.relative_name(r.path, root), here(r.problem))
        for r in source.records
    ]
    ignored = [(storage.relative_name(i.path, root), i.reason) for i in source.ignored]
    return [source.class_names, records, ignored]


@pytest.mark.parametrize("format", ["folder", "csv", "kinetics", "ssv2"])
def test_each_layout_reads_the_same_from_a_bucket(format: DatasetFormat, bucket: str, tmp_path: Path) -> None:
    local = write_layout(tmp_path / "dataset", format)
    storage.upload(tmp_path / "dataset", f"{bucket}/dataset")
    remote = f"{bucket}/dataset/{local.relative_to(tmp_path / 'dataset').as_posix()}".rstrip("/.")
    video_root = None if format in ("folder", "csv") else tmp_path / "dataset"
    on_disk = read_source(local, format, video_root=video_root)
    in_bucket = read_source(remote, format, video_root=f"{bucket}/dataset" if video_root else None)
    assert summary(in_bucket, f"{bucket}/dataset") == summary(on_disk, tmp_path / "dataset")
    assert any(record.problem for record in on_disk.records) or format == "folder"
