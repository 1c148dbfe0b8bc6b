"""Reading shards with random access: whole members in one read, frames members left on disk; in a
bucket, a clip's frames alone, and old frames shards without an index read whole with one warning."""

from __future__ import annotations

import json
import logging
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds

from vidtx import storage
from vidtx.data.samples import open_sample
from vidtx.data.tar_reader import MemberRange, tar_samples
from vidtx.manifest import FRAMES_MEMBER, load_manifest
from vidtx.media.frames import JpegFrames
from vidtx.shard.tars import add_indexes
from vidtx.storage import objects


def write_tar(path: Path) -> bytes:
    frames = bytes(range(256)) * 40
    with wds.TarWriter(str(path), encoder=False) as writer:
        writer.write({"__key__": "a", "json": b'{"n": 1}', "mp4": b"video bytes"})
        writer.write({"__key__": "b", "json": b'{"n": 2}', "frames": frames})
        writer.write({"__key__": "c", "json": b'{"n": 3}', "mp4": b"x" * 5000})
    return frames


def test_samples_hold_whole_members_and_a_range_for_frames(tmp_path: Path) -> None:
    frames = write_tar(tmp_path / "shard.tar")
    samples = list(tar_samples([{"url": str(tmp_path / "shard.tar")}], handler=lambda err: False))
    assert [sample["__key__"] for sample in samples] == ["a", "b", "c"]
    assert samples[0]["mp4"] == b"video bytes"
    assert samples[1]["json"] == b'{"n": 2}'
    member = samples[1]["frames"]
    assert isinstance(member, MemberRange)
    assert member.size == len(frames)
    assert member.read_ranges([(0, 3), (1000, 1010)]) == [frames[0:3], frames[1000:1010]]


def test_a_cut_tar_gives_what_precedes_the_cut_and_reports_the_rest(tmp_path: Path) -> None:
    write_tar(tmp_path / "shard.tar")
    data = (tmp_path / "shard.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(data[: data.index(b"x" * 5000) + 100])  # inside c's video
    errors: list[Exception] = []
    urls = [{"url": str(tmp_path / "cut.tar")}, {"url": str(tmp_path / "shard.tar")}]
    samples = list(tar_samples(urls, handler=lambda err: errors.append(err) or True))
    # c, cut in its video, is dropped: not passed on as its json alone
    assert [sample["__key__"] for sample in samples] == ["a", "b", "a", "b", "c"]
    assert samples[1]["json"] == b'{"n": 2}'
    assert samples[4]["mp4"] == b"x" * 5000
    assert len(errors) == 1
    assert str(tmp_path / "cut.tar") in errors[0].args


def test_near_ranges_are_merged_within_the_slack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(objects, "RANGE_SLACK", 10)
    # 0-5 and 5-8 touch, 17 is 9 past 8 (merged), 40 is 20 past 30 (not), 45-50 lies inside 40-60
    ranges = [(40, 60), (0, 5), (17, 30), (5, 8), (45, 50)]
    assert objects.merged_ranges(ranges) == [(0, 30), (40, 60)]


def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The [start, end) of every ranged GET made from now on (`storage.read_ranges` makes them)."""
    reads: list[tuple[int, int]] = []
    lock, read_range = threading.Lock(), objects.read_range

    def counted(where: str, start: int, end: int) -> bytes:
        with lock:
            reads.append((start, end))
        return read_range(where, start, end)

    monkeypatch.setattr(objects, "read_range", counted)
    return reads


@pytest.mark.slow
def test_a_clip_from_a_bucket_reads_its_frames_and_the_merge_slack_only(
    bucket_frames_shards: str, frames_shards: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = load_manifest(bucket_frames_shards, "train").shard_urls()[0]
    sample = next(iter(tar_samples([{"url": url}], handler=lambda err: False)))
    member = sample[FRAMES_MEMBER]
    assert isinstance(member, MemberRange)
    offsets = json.loads(sample["json"])["offsets"]
    frame = [(member.offset + offsets[i], member.offset + offsets[i + 1]) for i in range(len(offsets) - 1)]
    on_disk = open_sample(
        next(iter(tar_samples([{"url": str(frames_shards / storage.name_of(url))}], print))), 32, 1
    )
    reads = counted_reads(monkeypatch)

    monkeypatch.setattr(objects, "RANGE_SLACK", 1)  # only touching frames share a request
    clip = JpegFrames(member, offsets, 12.0).frames([7, 0, 1, 3, 7])
    assert sorted(reads) == [(frame[0][0], frame[1][1]), frame[3], frame[7]]
    assert np.array_equal(clip, on_disk[0].frames([7, 0, 1, 3, 7]))

    reads.clear()
    gap = frame[3][0] - frame[1][1]  # frame 2's bytes
    monkeypatch.setattr(objects, "RANGE_SLACK", gap + 1)  # 1 to 3 merge across frame 2, not 3 to 7
    JpegFrames(member, offsets, 12.0).frames([0, 1, 3, 7])
    assert sorted(reads) == [(frame[0][0], frame[3][1]), frame[7]]
    assert (
        sum(end - start for start, end in reads)
        == sum(e - s for s, e in (frame[0], frame[1], frame[3], frame[7])) + gap
    )


@pytest.mark.slow
def test_frames_shards_without_an_index_read_whole_and_warn_once_per_split(
    frames_shards: Path, bucket: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = tmp_path / "old"
    shutil.copytree(frames_shards, old, ignore=shutil.ignore_patterns("*.index.json"))
    storage.upload(old, f"{bucket}/old")
    urls = [{"url": url} for url in load_manifest(f"{bucket}/old", "train").shard_urls()]
    assert len(urls) > 1
    with caplog.at_level(logging.WARNING, logger="vidtx.data.tar_reader"):
        unindexed = list(tar_samples(urls, handler=lambda err: False))
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1
    assert f"`vidtx index {bucket}/old`" in warnings[0]
    assert all(isinstance(sample[FRAMES_MEMBER], bytes) for sample in unindexed)

    assert len(add_indexes(f"{bucket}/old")) == len(urls) + len(load_manifest(f"{bucket}/old", "val").shards)
    assert add_indexes(f"{bucket}/old") == []  # every tar has its index now
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vidtx.data.tar_reader"):
        indexed = list(tar_samples(urls, handler=lambda err: False))
    assert caplog.records == []
    assert [s["__key__"] for s in indexed] == [s["__key__"] for s in unindexed]
    for sample, whole in zip(indexed, unindexed, strict=True):
        member = sample[FRAMES_MEMBER]
        assert isinstance(member, MemberRange)
        assert member.read_ranges([(0, member.size)]) == [whole[FRAMES_MEMBER]]
