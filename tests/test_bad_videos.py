"""Bad videos at shard time, on real files: `vidtx shard` probes every video, rejects the bad ones with a
one-line reason, shards the rest, fails a split with too many rejects, and survives a video whose read
hangs or a prober that dies (issue 10, point 1, data side).

The videos are written by media.py (see `VIDEO_CASES`); the sharded dataset is conftest's `bad_dataset`.
"""

import io
import json
import multiprocessing
import os
import signal
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import av
import pytest
import webdataset as wds
from media import SHARDED, VFR_PTS_MS, VIDEO_CASES, case_bytes, encode, good, moving_frames, write_dataset

from vidtx.config import ReencodeConfig, ShardConfig
from vidtx.manifest import load_manifest
from vidtx.media.decode import VideoDecodeError
from vidtx.media.probe import probe_video
from vidtx.shard.prepare import RejectedVideoError, VideoPreparer
from vidtx.stages.shard import shard_dataset

# (size, frames) as the shard's json records them
EXPECTED_STREAMS = {
    "five_frames.mp4": (64, 48, 5),
    "portrait.mp4": (48, 64, 12),
    "tiny.mp4": (18, 14, 12),
    "uhd_4k.mp4": (3840, 2160, 3),
    "vfr.mp4": (64, 48, 12),
    "vp9.webm": (64, 48, 12),
    "h264.mkv": (64, 48, 12),
    "mpeg4.avi": (64, 48, 12),
}


def rejects_by_path(shards: Path) -> dict[str, str]:
    lines = (shards / "train.rejects.jsonl").read_text().splitlines()
    return {json.loads(line)["path"]: json.loads(line)["reason"] for line in lines}


# --- `vidtx shard` probes, rejects with a reason, shards the rest -----------------------------------


@pytest.mark.parametrize("name", sorted(VIDEO_CASES))
def test_vidtx_shard_rejects_or_keeps_each_kind_of_video(
    bad_dataset: tuple[Path, subprocess.CompletedProcess[str]], name: str
) -> None:
    shards, result = bad_dataset
    assert result.returncode == 0, result.stderr
    reason = VIDEO_CASES[name][1]
    rejects = rejects_by_path(shards)
    if reason is None:
        assert name not in rejects
        return
    assert rejects[name].startswith(reason)
    assert "\n" not in rejects[name]
    # one log line names the shard, the file and the reason
    assert f"rejected {name}: {reason}" in result.stderr


def test_vidtx_shard_keeps_every_good_and_odd_video_with_its_stream_facts(
    bad_dataset: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    shards, result = bad_dataset
    manifest = load_manifest(shards, "train")
    expected = 4 + len(SHARDED)  # the four good videos once (the duplicate row is a reject)
    assert manifest.num_samples == expected
    assert f"train: {expected} samples in 1 shards, 12 rejected" in result.stdout
    metas = {}
    for sample in wds.DataPipeline(wds.SimpleShardList(manifest.shard_urls()), wds.tarfile_to_samples()):
        meta = json.loads(sample["json"])
        metas[meta["source"]] = meta
        extension = Path(meta["source"]).suffix[1:]
        assert sample[extension] == (shards.parent / "videos" / meta["source"]).read_bytes()  # copied
    for name, (width, height, frames) in EXPECTED_STREAMS.items():
        assert (metas[name]["width"], metas[name]["height"], metas[name]["frames"]) == (width, height, frames)
    assert metas["vfr.mp4"]["fps"] != 12.0  # the average rate of the uneven timestamps


def test_the_vfr_file_really_has_uneven_timestamps() -> None:
    with av.open(io.BytesIO(case_bytes("vfr.mp4"))) as container:
        stream = container.streams.video[0]
        times = [round(float(frame.time) * 1000) for frame in container.decode(stream)]
    assert times == VFR_PTS_MS


# --- the reject threshold ------------------------------------------------------------------------


def test_too_many_rejects_fail_the_job_with_the_reasons_counted(
    tmp_path: Path, vidtx: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    annotations = write_dataset(tmp_path / "videos")
    result = vidtx(
        "shard",
        str(annotations),
        str(tmp_path / "shards"),
        "-s",
        "shard.processes=1",
        "-s",
        "shard.min_frames=3",
    )
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("error: train: 12 of 24 videos rejected (> max_reject_fraction 0.2): ")
    for counted in [
        "2 x not a readable video container",
        "2 x malformed row",
        "1 x undecodable",
        "1 x empty file",
        "1 x not a video",
        "1 x no video stream",
        "1 x too short",
        "1 x missing",
        "1 x unreadable",
        "1 x duplicate key",
    ]:
        assert counted in error
    assert error.endswith(f"see {tmp_path / 'shards/train.rejects.jsonl'}")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "shards/train.manifest.json").exists()


# --- a video that hangs or kills the prober --------------------------------------------------------


def the_prober() -> multiprocessing.Process:
    (child,) = [p for p in multiprocessing.active_children() if p.name == "vidtx-prepare"]
    return child


def test_a_fifo_is_rejected_without_being_read_and_a_stalled_prober_is_killed(tmp_path: Path) -> None:
    """A FIFO with no writer would block its reader forever: it is rejected from its file type. A read
    that stalls anyway (a network mount) looks from outside like a prober that stops answering
    (SIGSTOP here): it is killed after `probe_timeout_s`, its video rejected, the next gets a new one."""
    (tmp_path / "good.mp4").write_bytes(good())
    os.mkfifo(tmp_path / "fifo.mp4")
    copy = ShardConfig()  # the video store, bytes copied
    with VideoPreparer(timeout_s=2) as preparer:
        with pytest.raises(RejectedVideoError, match=r"^unreadable: not a regular file$"):
            preparer.prepare(tmp_path / "fifo.mp4", copy)
        stalled = the_prober()
        os.kill(stalled.pid, signal.SIGSTOP)
        with pytest.raises(RejectedVideoError, match=r"^timeout: not probed within 2 s$"):
            preparer.prepare(tmp_path / "good.mp4", copy)
        assert not stalled.is_alive()
        assert preparer.prepare(tmp_path / "good.mp4", copy).info.num_frames == 12


def test_a_prober_that_dies_is_reported_and_replaced(tmp_path: Path) -> None:
    """A probe process killed from outside (as the OOM killer would) rejects only its video."""
    (tmp_path / "good.mp4").write_bytes(good())
    outcome: list[Exception] = []
    copy = ShardConfig()

    def prepare(preparer: VideoPreparer) -> None:
        try:
            preparer.prepare(tmp_path / "good.mp4", copy)
        except RejectedVideoError as err:
            outcome.append(err)

    with VideoPreparer(timeout_s=60) as preparer:
        assert preparer.prepare(tmp_path / "good.mp4", copy).info.num_frames == 12
        child = the_prober()
        os.kill(child.pid, signal.SIGSTOP)  # so that the request below waits for it
        thread = threading.Thread(target=prepare, args=(preparer,))
        thread.start()
        time.sleep(0.5)
        child.kill()
        thread.join(timeout=30)
        assert [str(err) for err in outcome] == ["decoder crashed (killed by SIGKILL)"]
        assert preparer.prepare(tmp_path / "good.mp4", copy).members == {"mp4": tmp_path / "good.mp4"}


# --- files that used to kill the job: larger than memory, names that are not UTF-8 -------------------


def test_videos_are_streamed_into_the_tar_and_larger_than_max_video_mb_rejected(tmp_path: Path) -> None:
    """A copied video goes from disk into the tar in blocks, never read whole (a file can be larger than
    memory): sharding a 30 MB file allocates a fraction of it. Above `shard.max_video_mb`: a reject."""
    big = good() + bytes(30_000_000)  # FFmpeg reads the MP4's atoms and ignores what trails them
    (tmp_path / "videos").mkdir()
    (tmp_path / "videos/big.mp4").write_bytes(big)
    (tmp_path / "videos/small.mp4").write_bytes(good())
    (tmp_path / "list.csv").write_text("path,label\nbig.mp4,x\nsmall.mp4,x\n")
    cfg = ShardConfig(
        source=tmp_path / "list.csv", video_root=tmp_path / "videos", output=tmp_path / "shards", processes=1
    )
    tracemalloc.start()
    manifest = shard_dataset(cfg).manifests["train"]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 5_000_000  # Python allocations of the whole job, the 30 MB file included
    samples = {
        json.loads(s["json"])["source"]: s
        for s in wds.WebDataset(manifest.shard_urls(cfg.output), shardshuffle=False)
    }
    assert samples["big.mp4"]["mp4"] == big
    limited = cfg.model_copy(
        update={"output": tmp_path / "limited", "max_video_mb": 10, "max_reject_fraction": 0.5}
    )
    manifest = shard_dataset(limited).manifests["train"]
    assert manifest.num_samples == 1
    assert [(r.path, r.reason) for r in manifest.rejects] == [
        ("big.mp4", "too large: 30 MB > shard.max_video_mb 10")
    ]


def test_file_names_that_are_not_utf8_are_sharded_and_reported_in_readable_json(tmp_path: Path) -> None:
    """Bytes of a name that are not UTF-8 (Latin-1 from an old camera) are kept on disk as they are and
    recorded as `\\xNN` escapes: the manifest, the rejects and the samples' json are valid JSON."""
    folder = os.fsencode(tmp_path / "videos/train") + b"/caf\xe9"
    os.makedirs(folder)
    for index in range(3):
        Path(os.fsdecode(folder + b"/ok%d.mp4" % index)).write_bytes(good())
    Path(os.fsdecode(folder + b"/f\xeate.mp4")).write_bytes(good())
    Path(os.fsdecode(folder + b"/\xffbroken.mp4")).write_bytes(b"not a video")
    cfg = ShardConfig(
        source=tmp_path / "videos", format="folder", output=tmp_path / "shards", max_reject_fraction=0.5
    )
    manifest = shard_dataset(cfg).manifests["train"]
    assert manifest.num_samples == 4
    assert manifest.class_names == ["caf\\xe9"]
    assert [r.path for r in manifest.rejects] == ["train/caf\\xe9/\\xffbroken.mp4"]
    assert (
        json.loads((tmp_path / "shards/train.rejects.jsonl").read_text())["key"]
        == "train/caf\\xe9/\\xffbroken"
    )
    sources = {
        json.loads(s["json"])["source"]
        for s in wds.WebDataset(manifest.shard_urls(cfg.output), shardshuffle=False)
    }
    assert "train/caf\\xe9/f\\xeate.mp4" in sources


def test_a_backslash_in_a_name_is_recorded_apart_from_a_byte_that_is_not_utf8(tmp_path: Path) -> None:
    """A file named `x\\xe9.mp4` (a backslash, then x e 9) and one whose name holds the byte 0xE9 got
    one key and one source, and two such class folders one class name; a backslash is now recorded
    doubled, so every recorded name is one name on disk, read back by unescaping `\\\\` and `\\xNN`."""
    root = os.fsencode(tmp_path / "videos")  # <class>/<video>: all train
    names = {b"caf\\xe9": [b"x\\xe9.mp4", b"x\xe9.mp4"], b"caf\xe9": [b"x\\xe9.mp4", b"back\\slash.mp4"]}
    for folder, files in names.items():
        os.makedirs(root + b"/" + folder)
        for name in files:
            Path(os.fsdecode(root + b"/" + folder + b"/" + name)).write_bytes(good())
    Path(os.fsdecode(root + b"/caf\xe9/broken\\x.mp4")).write_bytes(b"not a video")
    cfg = ShardConfig(
        source=tmp_path / "videos", format="folder", output=tmp_path / "shards", max_reject_fraction=0.5
    )
    manifest = shard_dataset(cfg).manifests["train"]
    assert manifest.class_names == ["caf\\\\xe9", "caf\\xe9"]
    assert [(r.key, r.path) for r in manifest.rejects] == [
        ("caf\\xe9/broken\\\\x", "caf\\xe9/broken\\\\x.mp4")
    ]
    samples = [
        json.loads(s["json"]) for s in wds.WebDataset(manifest.shard_urls(cfg.output), shardshuffle=False)
    ]
    assert sorted(meta["source"] for meta in samples) == [
        "caf\\\\xe9/x\\\\xe9.mp4",
        "caf\\\\xe9/x\\xe9.mp4",
        "caf\\xe9/back\\\\slash.mp4",
        "caf\\xe9/x\\\\xe9.mp4",
    ]
    assert len({meta["key"] for meta in samples}) == 4

    def on_disk(recorded: str) -> bytes:  # the names here are ASCII but for their escapes
        return recorded.encode().decode("unicode_escape").encode("latin-1")

    assert {on_disk(meta["source"]) for meta in samples} == {
        folder + b"/" + name for folder, files in names.items() for name in files
    }
    assert {on_disk(meta["label_name"]) for meta in samples} == set(names)
    # A re-run reads the shards' recorded results back: nothing is escaped twice.
    assert shard_dataset(cfg).manifests["train"] == manifest


def test_an_odd_sized_video_is_recorded_with_its_size_in_every_store(tmp_path: Path) -> None:
    """97x55: copied and as JPEG frames it keeps its size; H.264 needs even sizes, so the re-encode
    stores 96x54 and records the source's 97x55 beside it."""
    (tmp_path / "videos").mkdir()
    (tmp_path / "videos/odd.avi").write_bytes(encode(moving_frames(8, 97, 55), "avi", "mpeg4"))
    (tmp_path / "list.csv").write_text("path,label\nodd.avi,x\n")
    base = ShardConfig(source=tmp_path / "list.csv", video_root=tmp_path / "videos", processes=1)
    stores = {
        "copy": {},
        "frames": {"store": "frames"},
        "reencoded": {"reencode": ReencodeConfig(short_side=256, keyframe_interval=4)},
    }
    recorded = {}
    for name, update in stores.items():
        cfg = base.model_copy(update={"output": tmp_path / name, **update})
        [sample] = wds.WebDataset(
            shard_dataset(cfg).manifests["train"].shard_urls(cfg.output), shardshuffle=False
        )
        meta = json.loads(sample["json"])
        recorded[name] = (meta["width"], meta["height"], meta.get("source_width"), meta.get("source_height"))
    assert recorded == {
        "copy": (97, 55, None, None),
        "frames": (97, 55, 97, 55),
        "reencoded": (96, 54, 97, 55),
    }


def test_probing_a_damaged_file_gives_the_same_answer_every_time() -> None:
    """Decoding single-threaded: a file damaged in a few places is accepted or rejected, the same way in
    every run (threaded decoding let frame-thread timing decide), so re-runs stay byte-identical."""
    data = encode(moving_frames(48, 64, 48))
    for offset in range(len(data) // 8, len(data), len(data) // 8):
        damaged = bytearray(data)
        damaged[offset : offset + 64] = bytes(64)
        outcomes = set()
        for _ in range(8):
            try:
                outcomes.add(repr(probe_video(bytes(damaged))))
            except VideoDecodeError as err:
                outcomes.add(str(err))
        assert len(outcomes) == 1, f"damage at byte {offset}: {outcomes}"
