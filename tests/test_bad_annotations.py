"""Bad annotations: rows of a CSV, Kinetics or SSv2 annotation file that cannot be used are rejects naming
the file and line, and a whole file that cannot be read is a one-line error (issue 10, point 1, data side).
"""

import csv
import json
import logging
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from media import case_bytes, good

from vidtx.config import ShardConfig
from vidtx.shard.annotations import AnnotationError
from vidtx.shard.plan import plan_shards
from vidtx.shard.sources import UNLABELLED, read_source
from vidtx.shard.writer import ShardingError, finalize_split, write_shard
from vidtx.stages.shard import shard_dataset

# --- CSV ------------------------------------------------------------------------------------------


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


def test_vidtx_shard_reports_an_unusable_annotation_file_in_one_line(
    tmp_path: Path, vidtx: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    (tmp_path / "list.csv").write_text("path;label\na.mp4;x\n")
    result = vidtx("shard", str(tmp_path / "list.csv"), str(tmp_path / "shards"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'list.csv'}: missing column(s) ['label', 'path']; found ['path;label'] "
        "(the header looks ';'-separated: use commas)"
    ]


def test_a_csv_with_a_utf8_byte_order_mark_is_read(tmp_path: Path) -> None:
    (tmp_path / "list.csv").write_bytes(b"\xef\xbb\xbfpath,label\na.mp4,x\n")
    source = read_source(tmp_path / "list.csv", "csv")
    assert [(record.key, record.label, record.problem) for record in source.records] == [("a", 0, None)]


def test_annotation_paths_outside_the_video_root_are_rejects(tmp_path: Path) -> None:
    videos = tmp_path / "videos"
    videos.mkdir()
    outside = tmp_path / "secret.mp4"
    (videos / "list.csv").write_text(
        f"path,label\n./a.mp4,x\n../secret.mp4,x\n{outside},x\n{videos / 'sub/b.mp4'},x\nsub/../../c.mp4,x\n"
    )
    source = read_source(videos / "list.csv", "csv")
    problems = {record.key: record.problem for record in source.records}
    assert problems == {
        "a": None,
        "list.csv:3": f"outside the video root: '../secret.mp4' (list.csv:3) is not inside {videos}",
        "list.csv:4": f"outside the video root: '{outside}' (list.csv:4) is not inside {videos}",
        "sub/b": None,  # absolute, but inside the root: recorded relative to it
        "list.csv:6": f"outside the video root: 'sub/../../c.mp4' (list.csv:6) is not inside {videos}",
    }
    assert [record.path for record in source.records if not record.problem] == [
        videos / "a.mp4",
        videos / "sub/b.mp4",
    ]

    folder = write_ssv2(tmp_path / "ssv2", [{"id": "../../x", "template": "Moving [something] up"}])
    (ssv2,) = read_source(folder, "ssv2", video_root=folder / "videos").records
    assert ssv2.problem == (
        f"outside the video root: '../../x' (something-something-v2-train.json[0]) is not inside {folder / 'videos'}"
    )


SPLIT_RULE = "a split name is letters, digits, '_', '-' and '.' (not first), at most 100 characters"


def test_a_split_name_that_cannot_name_files_fails_the_job_before_anything_is_written(
    tmp_path: Path, vidtx: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """Split names become file names: `../../escaped` wrote `escaped-000000.tar`, its manifest and its
    rejects two folders above the output, and `a/b` failed the job with a raw `[Errno 2]`."""
    videos, output = tmp_path / "data/videos", tmp_path / "data/shards"
    videos.mkdir(parents=True)
    for name in ("a.mp4", "b.mp4"):
        (videos / name).write_bytes(good())
    annotations = videos / "list.csv"
    for split in ("../../escaped", "a/b"):
        annotations.write_text(f"path,label,split\na.mp4,x,train\nb.mp4,x,{split}\n")
        result = vidtx("shard", str(annotations), str(output), "--set", "shard.processes=1")
        assert result.returncode == 1
        assert result.stderr.splitlines() == [
            f"error: {annotations}:3: split {split!r} cannot name files: {SPLIT_RULE}"
        ]
    for split in ("{train,val}", ".hidden", "x" * 101):  # webdataset expands braces in shard URLs
        with annotations.open("w", newline="") as file:
            csv.writer(file).writerows([["path", "label", "split"], ["a.mp4", "x", split]])
        with pytest.raises(
            AnnotationError, match=f"^{re.escape(str(annotations))}:2: split .* cannot name files"
        ):
            read_source(annotations, "csv")
    latin1 = tmp_path / "folders" / os.fsdecode(b"v\xe9")  # a split folder whose name is not UTF-8
    (latin1 / "cat").mkdir(parents=True)
    (latin1 / "cat/c.mp4").write_bytes(good())
    with pytest.raises(AnnotationError, match="cannot name files") as error:
        read_source(tmp_path / "folders", "folder")
    assert str(error.value).startswith(f"{latin1}: split 'v\\udce9' cannot name files")

    # The writer and the finalizer name files only through the checked split names.
    annotations.write_text("path,label\na.mp4,x\n")
    cfg = ShardConfig(source=annotations, output=output, processes=1)
    [spec] = plan_shards(cfg)
    with pytest.raises(ValueError, match="cannot name files"):
        write_shard(spec.model_copy(update={"split": "../../escaped"}), cfg)
    result = write_shard(spec, cfg).model_copy(update={"split": "../../escaped"})
    with pytest.raises(ValueError, match="cannot name files"):
        finalize_split(cfg, "../../escaped", [result])
    assert {path.name for path in tmp_path.rglob("*escaped*")} == set()
    assert sorted(path.name for path in output.iterdir()) == ["train-000000.stats.json", "train-000000.tar"]


# --- Kinetics -------------------------------------------------------------------------------------


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
    manifests = shard_dataset(cfg.model_copy(update={"max_reject_fraction": 1.0})).manifests
    assert manifests["train"].class_names == ["abseiling", "air drumming", "zumba"]
    assert manifests["train"].num_samples == 2
    assert [r.reason.split(":")[0] for r in manifests["val"].rejects] == ["duplicate key"]
    assert manifests["val"].num_samples == 0


@pytest.mark.parametrize(
    ("start", "end"), [("inf", "10"), ("0", "1e400"), ("nan", "10"), ("-5", "10"), ("20", "10")]
)
def test_kinetics_times_must_be_finite_non_negative_and_ordered(tmp_path: Path, start: str, end: str) -> None:
    (tmp_path / "train.csv").write_text(
        f"label,youtube_id,time_start,time_end,split\nabseiling,aaa,{start},{end},train\nabseiling,bbb,0,10,train\n"
    )
    first, second = read_source(tmp_path / "train.csv", "kinetics").records
    assert first.problem == (
        f"malformed row: train.csv:2 has times that are not finite, >= 0 and start <= end ({start!r}, {end!r})"
    )
    assert (second.key, second.problem) == ("bbb_000000_000010", None)


def test_a_kinetics_csv_without_labels_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = write_kinetics(tmp_path)
    (folder / "test.csv").write_text("youtube_id,time_start,time_end,split\nddd,0,10,test\n")
    with caplog.at_level(logging.WARNING, logger="vidtx.shard.sources"):
        source = read_source(folder, "kinetics", video_root=folder / "videos")
    reason = "no 'label' column: unlabelled rows (a test split?) cannot be trained or evaluated on"
    assert source.splits == ["train", "val"]
    assert [(item.path, item.reason) for item in source.ignored] == [(folder / "test.csv", reason)]
    assert f"skipping {folder / 'test.csv'}: {reason}" in caplog.messages
    with pytest.raises(AnnotationError, match=r"missing column\(s\) \['label'\]"):
        read_source(folder / "test.csv", "kinetics")  # the only file given: nothing else to shard


# --- Something-Something v2 ---------------------------------------------------------------------------


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
    manifest = shard_dataset(cfg).manifests["train"]
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
        ("labels.json", '{"Moving something up": 2.9}', "every class id must be an integer (2.9 is not"),
        ("labels.json", '{"Moving something up": true}', "every class id must be an integer (True is not"),
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
