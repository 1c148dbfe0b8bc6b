"""Bad videos at shard time, on real files: `vidtx shard` probes every video, rejects the bad ones with a
one-line reason, shards the rest, fails a split with too many rejects, and survives a video whose read
hangs or a prober that dies (issue 10, point 1, data side).

The videos are written by media.py (see `VIDEO_CASES`); the sharded dataset is conftest's `bad_dataset`.
"""

import io
import json
import multiprocessing
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import av
import pytest
import webdataset as wds
from media import SHARDED, VFR_PTS_MS, VIDEO_CASES, case_bytes, good, write_dataset

from vidtx.config import ShardConfig
from vidtx.manifest import load_manifest
from vidtx.shard.plan import plan_shards
from vidtx.shard.prepare import RejectedVideoError, VideoPreparer
from vidtx.shard.writer import shard_dataset

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


def test_a_video_that_blocks_forever_is_rejected_after_the_probe_timeout(tmp_path: Path) -> None:
    """A FIFO with no writer blocks the read like a stalled network mount: the prober is killed."""
    for name in ("a.mp4", "c.mp4"):
        (tmp_path / name).write_bytes(good())
    os.mkfifo(tmp_path / "b.mp4")
    (tmp_path / "list.csv").write_text("path,label\na.mp4,x\nb.mp4,x\nc.mp4,x\n")
    cfg = ShardConfig(
        source=tmp_path / "list.csv", output=tmp_path / "shards", processes=1, max_reject_fraction=0.5
    )
    order = [Path(item.path).name for item in plan_shards(cfg)[0].items]
    assert order.index("b.mp4") < 2  # so a video comes after the hanging one
    manifest = shard_dataset(cfg.model_copy(update={"probe_timeout_s": 3}))["train"]
    assert manifest.num_samples == 2  # the video after the hanging one is probed by a fresh child
    assert [(r.path, r.reason) for r in manifest.rejects] == [("b.mp4", "timeout: not probed within 3 s")]


def test_a_prober_that_dies_is_reported_and_replaced(tmp_path: Path) -> None:
    """A probe process killed from outside (as the OOM killer would) rejects only its video."""
    (tmp_path / "good.mp4").write_bytes(good())
    os.mkfifo(tmp_path / "stuck.mp4")
    outcome: list[Exception] = []
    copy = ShardConfig()  # the video store, bytes copied

    def prepare_stuck(preparer: VideoPreparer) -> None:
        try:
            preparer.prepare(tmp_path / "stuck.mp4", copy)
        except RejectedVideoError as err:
            outcome.append(err)

    with VideoPreparer(timeout_s=60) as preparer:
        assert preparer.prepare(tmp_path / "good.mp4", copy).info.num_frames == 12
        (child,) = [p for p in multiprocessing.active_children() if p.name == "vidtx-prepare"]
        thread = threading.Thread(target=prepare_stuck, args=(preparer,))
        thread.start()
        child.kill()
        thread.join(timeout=30)
        assert [str(err) for err in outcome] == ["decoder crashed (killed by SIGKILL)"]
        assert preparer.prepare(tmp_path / "good.mp4", copy).members == {"mp4": good()}
