"""Reading shards with random access: whole members in one read, frames members left on disk."""

from __future__ import annotations

from pathlib import Path

import webdataset as wds

from vidtx.data.tar_reader import MemberRange, tar_samples


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
