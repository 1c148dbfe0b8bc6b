"""Bad inputs on real files: every bad video, annotation row or shard gets a one-line reason, and the
rest of the job goes on (issue 10, point 1, data side).

Videos are written with PyAV in the test (H.264 MP4, VP9 WebM, H.264 MKV, MPEG-4 AVI, AAC-only MP4),
then broken with plain byte operations; `vidtx shard` probes them and the loaders decode the shards.
"""

import functools
import io
import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch
import webdataset as wds
from PIL import Image

from vidtx.config import DataConfig, ShardConfig
from vidtx.data.annotations import AnnotationError
from vidtx.data.loader import build_eval_loader, build_train_loader
from vidtx.data.manifest import Manifest, ShardInfo, content_hash, load_manifest
from vidtx.data.prepare import RejectedVideoError, VideoPreparer
from vidtx.data.shard import ShardingError, plan_shards, shard_dataset
from vidtx.data.sources import UNLABELLED, read_source

# --- writing real (and really broken) files --------------------------------------------------------


def moving_frames(num_frames: int, width: int, height: int) -> np.ndarray:
    """A bright square moving right over a dark ramp; every frame differs. uint8 (T, H, W, 3)."""
    frames = np.zeros((num_frames, height, width, 3), np.uint8)
    frames[..., 1] = (np.arange(width) * 200 // width).astype(np.uint8)
    side = max(2, min(width, height) // 3)
    for t in range(num_frames):
        left = (t * max(1, width // num_frames)) % (width - side + 1)
        frames[t, :side, left : left + side] = 255
    return frames


def encode(
    frames: np.ndarray,
    container: str = "mp4",
    codec: str = "libx264",
    fps: int = 12,
    pts_ms: list[int] | None = None,
) -> bytes:
    """Frames (T, H, W, 3) as a video file; `pts_ms` gives each frame its own timestamp (VFR)."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as output:
        stream = output.add_stream(codec, rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        if codec == "libx264":
            stream.options = {"preset": "ultrafast"}
        if pts_ms is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
        for index, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            if pts_ms is not None:
                frame.pts, frame.time_base = pts_ms[index], Fraction(1, 1000)
            output.mux(stream.encode(frame))
        output.mux(stream.encode())
    return buffer.getvalue()


def audio_only() -> bytes:
    """An MP4 holding half a second of AAC silence and no video stream."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as output:
        stream = output.add_stream("aac", rate=16000)
        stream.layout = "mono"
        for index in range(8):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 16000, index * 1024
            output.mux(stream.encode(frame))
        output.mux(stream.encode())
    return buffer.getvalue()


def png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(moving_frames(1, 32, 32)[0]).save(buffer, format="PNG")
    return buffer.getvalue()


def corrupted(data: bytes) -> bytes:
    """The middle third of the MP4's media data overwritten with noise (the index stays intact)."""
    start = data.find(b"mdat") + 200
    noise = np.random.default_rng(0).integers(0, 256, len(data) // 3, dtype=np.uint8).tobytes()
    return data[:start] + noise + data[start + len(noise) :]


@functools.cache
def good() -> bytes:
    return encode(moving_frames(12, 64, 48))


VFR_PTS_MS = [0, 40, 80, 200, 240, 400, 420, 440, 700, 740, 780, 1000]

# name -> (how to write the file, reason the shard job gives, or None when the video is sharded)
VIDEO_CASES: dict[str, tuple[Callable[[], bytes] | None, str | None]] = {
    "corrupt.mp4": (lambda: corrupted(good()), "undecodable: PyAV cannot decode frames"),
    "truncated.mp4": (lambda: good()[: len(good()) // 2], "not a readable video container (Invalid data"),
    "zero_bytes.mp4": (lambda: b"", "empty file"),
    "notes.txt": (lambda: b"this is not a video\n" * 20, "not a readable video container (Invalid data"),
    "image.png": (png, "not a video: a still image (png_pipe)"),
    "audio_only.mp4": (audio_only, "no video stream"),
    "two_frames.mp4": (lambda: encode(moving_frames(2, 64, 48)), "too short: 2 frames < min_frames 3"),
    "missing.mp4": (None, "missing: file not found"),
    "a_folder.mp4": (None, "unreadable: Is a directory"),
    # sharded: fewer frames than the clip (padded when loading), odd sizes, VFR, other containers
    "five_frames.mp4": (lambda: encode(moving_frames(5, 64, 48)), None),
    "portrait.mp4": (lambda: encode(moving_frames(12, 48, 64)), None),
    "tiny.mp4": (lambda: encode(moving_frames(12, 18, 14)), None),
    "uhd_4k.mp4": (lambda: encode(moving_frames(3, 3840, 2160)), None),
    "vfr.mp4": (lambda: encode(moving_frames(12, 64, 48), pts_ms=VFR_PTS_MS), None),
    "vp9.webm": (lambda: encode(moving_frames(12, 64, 48), "webm", "libvpx-vp9"), None),
    "h264.mkv": (lambda: encode(moving_frames(12, 64, 48), "matroska"), None),
    "mpeg4.avi": (lambda: encode(moving_frames(12, 64, 48), "avi", "mpeg4"), None),
}


@functools.cache
def case_bytes(name: str) -> bytes:
    write = VIDEO_CASES[name][0]
    assert write is not None
    return write()


SHARDED = sorted(name for name, (_, reason) in VIDEO_CASES.items() if reason is None)
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


def vidtx(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "vidtx", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def write_dataset(folder: Path) -> Path:
    """Every video case plus four good videos, listed in a CSV (with bad rows of its own)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for index in range(4):
        (folder / f"good{index}.mp4").write_bytes(good())
        rows.append(f"good{index}.mp4,{'ab'[index % 2]}")
    for name, (write, _) in VIDEO_CASES.items():
        if write is not None:
            (folder / name).write_bytes(case_bytes(name))
        rows.append(f"{name},a")
    (folder / "a_folder.mp4").mkdir()
    rows += ["good0.mp4,b", "good1.mp4,a,train,extra", "good2.mp4,"]  # duplicate, 4 fields, no label
    (folder / "list.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    return folder / "list.csv"


@pytest.fixture(scope="module")
def bad_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The dataset sharded with `vidtx shard` (min_frames 3, any reject fraction allowed):
    (shard folder, the finished command)."""
    root = tmp_path_factory.mktemp("bad_inputs")
    annotations = write_dataset(root / "videos")
    options = ["-j", "1", "--min-frames", "3", "--max-reject-fraction", "1"]
    return root / "shards", vidtx("shard", str(annotations), str(root / "shards"), *options)


def rejects_by_path(shards: Path) -> dict[str, str]:
    lines = (shards / "train.rejects.jsonl").read_text().splitlines()
    return {json.loads(line)["path"]: json.loads(line)["reason"] for line in lines}


# --- videos at shard time: `vidtx shard` probes, rejects with a reason, shards the rest --------------


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


def test_bad_annotation_rows_of_a_csv_are_rejects(
    bad_dataset: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    shards, _ = bad_dataset
    reasons = [json.loads(line) for line in (shards / "train.rejects.jsonl").read_text().splitlines()]
    by_key = {reject["key"]: reject for reject in reasons}
    duplicate = by_key["good0"]  # the second listing (label b) is the reject, the first is sharded
    assert duplicate["reason"] == "duplicate key: 'good0' (list.csv:23) is already listed at list.csv:2"
    assert duplicate["label"] == 1
    assert by_key["list.csv:24"]["reason"] == "malformed row: list.csv:24 has 4 fields, the header 2"
    assert by_key["list.csv:25"]["reason"] == "malformed row: list.csv:25 has an empty 'label'"
    assert by_key["list.csv:25"]["path"] == "list.csv"  # the file to fix


# --- the reject threshold ------------------------------------------------------------------------


def test_too_many_rejects_fail_the_job_with_the_reasons_counted(tmp_path: Path) -> None:
    annotations = write_dataset(tmp_path / "videos")
    result = vidtx("shard", str(annotations), str(tmp_path / "shards"), "-j", "1", "--min-frames", "3")
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

    def prepare_stuck(preparer: VideoPreparer) -> None:
        try:
            preparer.prepare(tmp_path / "stuck.mp4", None)
        except RejectedVideoError as err:
            outcome.append(err)

    with VideoPreparer(timeout_s=60) as preparer:
        assert preparer.prepare(tmp_path / "good.mp4", None).info.num_frames == 12
        (child,) = [p for p in multiprocessing.active_children() if p.name == "vidtx-prepare"]
        thread = threading.Thread(target=prepare_stuck, args=(preparer,))
        thread.start()
        child.kill()
        thread.join(timeout=30)
        assert [str(err) for err in outcome] == ["decoder crashed (killed by SIGKILL)"]
        assert preparer.prepare(tmp_path / "good.mp4", None).data == good()


# --- annotations ---------------------------------------------------------------------------------


def write_kinetics(folder: Path) -> Path:
    (folder / "videos").mkdir(parents=True)
    for stem in ("aaa_000000_000010", "bbb_000005_000015", "ccc_000000_000010"):
        (folder / "videos" / f"{stem}.mp4").write_bytes(good())
    (folder / "train.csv").write_text(
        "label,youtube_id,time_start,time_end,split\n"
        "abseiling,aaa,0,10,train\n"
        "zumba,bbb,5,15,train\n"  # not in the given classes
        "abseiling,ccc,zero,10,train\n"  # times that are not numbers
        "abseiling,gone,0,10,train\n"  # no such video
    )
    (folder / "val.csv").write_text(
        "label,youtube_id,time_start,time_end,split\nair drumming,aaa,0,10,val\n"  # already in train
    )
    return folder


def test_kinetics_rows_with_unknown_labels_duplicates_or_bad_times_are_rejects(tmp_path: Path) -> None:
    folder = write_kinetics(tmp_path)
    classes = ["abseiling", "air drumming"]
    source = read_source(folder, "kinetics", video_root=folder / "videos", classes=classes)
    problems = {record.key: record.problem for record in source.records}
    assert problems == {
        "aaa_000000_000010": "duplicate key: 'aaa_000000_000010' (val.csv:2) is already listed at train.csv:2",
        "bbb_000005_000015": "unknown label: 'zumba' (train.csv:3) is not in the given classes",
        "train.csv:4": "malformed row: train.csv:4 has times that are not numbers ('zero', '10')",
        "gone_000000_000010": None,  # a missing video is rejected when sharding
    }
    assert source.class_names == classes
    labels = {(record.key, record.split): record.label for record in source.records}
    assert labels[("bbb_000005_000015", "train")] == UNLABELLED
    assert labels[("aaa_000000_000010", "train")] == 0

    cfg = ShardConfig(
        source=folder,
        format="kinetics",
        video_root=folder / "videos",
        output=tmp_path / "shards",
        processes=1,
    )
    with pytest.raises(ShardingError, match="train: 2 of 4 videos rejected") as error:
        shard_dataset(cfg)  # without a class list, zumba is a class of its own
    assert "1 x malformed row" in str(error.value)
    assert "1 x missing" in str(error.value)
    manifests = shard_dataset(cfg.model_copy(update={"max_reject_fraction": 1.0}))
    assert manifests["train"].class_names == ["abseiling", "air drumming", "zumba"]
    assert manifests["train"].num_samples == 2
    assert [r.reason.split(":")[0] for r in manifests["val"].rejects] == ["duplicate key"]
    assert manifests["val"].num_samples == 0


def write_ssv2(folder: Path, train: object) -> Path:
    labels = {"Pushing something from left to right": "0", "Moving something up": "1"}
    (folder / "videos").mkdir(parents=True, exist_ok=True)
    (folder / "something-something-v2-labels.json").write_text(json.dumps(labels))
    (folder / "something-something-v2-train.json").write_text(
        train if isinstance(train, str) else json.dumps(train)
    )
    for video_id in ("1", "2", "3"):
        (folder / "videos" / f"{video_id}.webm").write_bytes(case_bytes("vp9.webm"))
    return folder


def test_ssv2_templates_missing_from_labels_json_and_malformed_entries_are_rejects(tmp_path: Path) -> None:
    train = [
        {"id": "1", "template": "Pushing [something] from left to right"},
        {"id": "2", "template": "Spinning [something] that quickly stops spinning"},
        {"id": "3"},
        ["not", "an", "object"],
        {"id": "3", "template": "Moving [something] up"},
    ]
    folder = write_ssv2(tmp_path, train)
    cfg = ShardConfig(
        source=folder,
        format="ssv2",
        video_root=folder / "videos",
        output=tmp_path / "shards",
        processes=1,
        max_reject_fraction=1.0,
    )
    manifest = shard_dataset(cfg)["train"]
    assert manifest.num_samples == 2
    assert manifest.class_names == ["Pushing something from left to right", "Moving something up"]
    reasons = [reject.reason for reject in manifest.rejects]
    assert sorted(reasons) == [
        "malformed row: something-something-v2-train.json[2] is not an object with string 'id' and 'template'",
        "malformed row: something-something-v2-train.json[3] is not an object with string 'id' and 'template'",
        "unknown label: 'Spinning something that quickly stops spinning' (something-something-v2-train.json[1]) "
        "is not in something-something-v2-labels.json",
    ]
    unknown = next(r for r in manifest.rejects if r.reason.startswith("unknown"))
    assert (unknown.key, unknown.path, unknown.label) == ("2", "2.webm", UNLABELLED)


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("train.json", '[{"id": "1", "template": "Moving [something] up"}', "not valid JSON (Expecting"),
        ("train.json", '{"id": "1"}', "expected an array at the top level, found dict"),
        ("train.json", b"\xff\xfe[]", "not valid JSON"),
        ("labels.json", '["Moving something up"]', "expected an object at the top level, found list"),
        ("labels.json", '{"Moving something up": "one"}', "every class id must be an integer"),
        ("labels.json", '{"Moving something up": "1", "Pushing": "1"}', "class ids are not distinct"),
    ],
)
def test_an_unusable_ssv2_file_is_a_clear_error(
    tmp_path: Path, file: str, content: str | bytes, message: str
) -> None:
    folder = write_ssv2(tmp_path, [])
    target = folder / f"something-something-v2-{file}"
    target.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(AnnotationError) as error:
        read_source(folder, "ssv2", video_root=folder / "videos")
    assert str(error.value).startswith(f"{target}: {message}")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "path;label\na.mp4;x\n",
            "missing column(s) ['label', 'path']; found ['path;label'] (the header looks ';'",
        ),
        (
            "path\tlabel\na.mp4\tx\n",
            "missing column(s) ['label', 'path']; found ['path\\tlabel'] (the header looks '\\t'",
        ),
        ("file,class\na.mp4,x\n", "missing column(s) ['label', 'path']; found ['file', 'class']"),
        ("", "empty file (no header row)"),
        (b"path,label\n\xff\xfe,x\n", "not a UTF-8 text file (invalid start byte at byte 11)"),
        ("path,label\n" + "a" * 200_000 + ",x\n", "unreadable CSV (field larger than field limit"),
    ],
)
def test_an_unusable_csv_is_a_clear_error(tmp_path: Path, content: str | bytes, message: str) -> None:
    path = tmp_path / "list.csv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(AnnotationError) as error:
        read_source(path, "csv")
    assert str(error.value).startswith(f"{path}: {message}")


def test_vidtx_shard_reports_an_unusable_annotation_file_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "list.csv").write_text("path;label\na.mp4;x\n")
    result = vidtx("shard", str(tmp_path / "list.csv"), str(tmp_path / "shards"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'list.csv'}: missing column(s) ['label', 'path']; found ['path;label'] "
        "(the header looks ';'-separated: use commas)"
    ]


# --- the loaders: decode failures are skipped and logged, odd videos decode and crop ----------------


@pytest.fixture
def single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


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
        assert clip.shape == (1, 3, 8, 28, 28)  # (views, C, T, H, W)
        assert clip.std() > 0.05
    five = views["five_frames"][0]  # 5 frames, padded to 8 by repeating frames
    assert len({five[:, t].numpy().tobytes() for t in range(8)}) == 5
    epoch = list(build_train_loader(cfg, batch_size=4, seed=0))
    assert len(epoch) == 3
    assert all(clips.shape == (4, 3, 8, 28, 28) for clips, _ in epoch)


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
    with caplog.at_level(logging.WARNING, logger="vidtx.data.loader"):
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
    truncated = copy / "train-000001.tar"
    with tarfile.open(truncated) as archive:
        third = [m for m in archive.getmembers() if m.name.endswith(".mp4")][2]
    truncated.write_bytes(truncated.read_bytes()[: third.offset_data + third.size // 2])
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
    with caplog.at_level(logging.WARNING, logger="vidtx.data.loader"):
        keys = [key for _, _, batch in build_eval_loader(cfg, "train", batch_size=4) for key in batch]
        epoch = list(build_train_loader(cfg, batch_size=4, seed=0))
    assert len(keys) == 24 - 3  # the truncated shard keeps its first two samples
    assert len(epoch) == 6  # a whole epoch: training goes on, resampling the readable data
    assert all(clips.shape == (4, 3, 4, 28, 28) for clips, _ in epoch)
    assert all(torch.isfinite(clips).all() for clips, _ in epoch)
    messages = [r.getMessage() for r in caplog.records]
    size = (damaged_shards / "train-000001.tar").stat().st_size
    damaged = f"split train: damaged shard train-000001.tar: {size} bytes, the manifest says"
    assert sum(m.startswith(damaged) for m in messages) == 1  # when the train loader is built
    unreadable = [m for m in messages if "unreadable shard data" in m]
    assert unreadable
    assert all("ReadError" in m and "train-000001.tar" in m for m in unreadable)


def test_a_train_loader_without_any_shard_file_fails_instead_of_waiting_forever(
    damaged_shards: Path,
) -> None:
    for tar in damaged_shards.glob("train-*.tar"):
        tar.unlink()
    with pytest.raises(FileNotFoundError, match="none of the 5 'train' shards exists"):
        build_train_loader(loader_config(damaged_shards), batch_size=4, seed=0)


def test_vidtx_inspect_reports_damaged_shards_instead_of_crashing(damaged_shards: Path) -> None:
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
