import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from media import encode, moving_frames

from vidtx.config import ShardConfig
from vidtx.shard.outcome import shard_summary
from vidtx.shard.sources import NothingToShardError, Source, read_source
from vidtx.stages.shard import shard_dataset


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"video")
    return path


def test_folder_with_split_folders(tmp_path: Path) -> None:
    for relative in ["train/cat/a.mp4", "train/dog/b.webm", "val/cat/c.mp4", "val/dog/notes.txt"]:
        touch(tmp_path / relative)
    source = read_source(tmp_path, "folder")
    assert source.class_names == ["cat", "dog"]
    assert source.splits == ["train", "val"]
    assert [(r.key, r.label, r.split) for r in source.records] == [
        ("train/cat/a", 0, "train"),
        ("train/dog/b", 1, "train"),
        ("val/cat/c", 0, "val"),
    ]
    assert source.records[1].path == tmp_path / "train/dog/b.webm"


def test_folder_per_class_without_splits_is_all_train(tmp_path: Path) -> None:
    for relative in ["zebra/1.mp4", "ant/2.MP4", "ant/3.avi"]:
        touch(tmp_path / relative)
    source = read_source(tmp_path, "folder")
    assert source.class_names == ["ant", "zebra"]
    assert source.label_map == {"ant": 0, "zebra": 1}
    assert {(r.key, r.label, r.split) for r in source.records} == {
        ("zebra/1", 1, "train"),
        ("ant/2", 0, "train"),
        ("ant/3", 0, "train"),
    }


def test_kinetics_csv_finds_videos_by_stem_anywhere_and_keeps_missing_ones(tmp_path: Path) -> None:
    annotations = tmp_path / "annotations"
    annotations.mkdir()
    (annotations / "train.csv").write_text(
        "label,youtube_id,time_start,time_end,split\n"
        "abseiling,abc123,10,20,train\n"
        "air drumming,xyz789,0,10,train\n"
        "abseiling,gone000,5,15,train\n"
    )
    (annotations / "val.csv").write_text(
        "label,youtube_id,time_start,time_end,split\nair drumming,vvv,1.0,11.0,val\n"
    )
    touch(tmp_path / "videos/train/abseiling/abc123_000010_000020.mp4")
    touch(tmp_path / "videos/xyz789.mkv")
    touch(tmp_path / "videos/val/vvv_000001_000011.mp4")
    source = read_source(annotations, "kinetics", video_root=tmp_path / "videos")
    assert source.class_names == ["abseiling", "air drumming"]
    records = {r.key: r for r in source.records}
    assert (
        records["abc123_000010_000020"].path == tmp_path / "videos/train/abseiling/abc123_000010_000020.mp4"
    )
    assert records["xyz789_000000_000010"].path == tmp_path / "videos/xyz789.mkv"
    assert records["vvv_000001_000011"].split == "val"
    assert records["vvv_000001_000011"].label == 1
    assert not records["gone000_000005_000015"].path.exists()  # rejected later as missing

    single = read_source(annotations / "val.csv", "kinetics", video_root=tmp_path / "videos")
    assert [r.key for r in single.records] == ["vvv_000001_000011"]


def test_ssv2_json_labels_use_the_label_file_ids(tmp_path: Path) -> None:
    labels = {"Pushing something from left to right": "1", "Approaching something with your camera": "0"}
    (tmp_path / "something-something-v2-labels.json").write_text(json.dumps(labels))
    train = [
        {
            "id": "11",
            "label": "pushing a cup from left to right",
            "template": "Pushing [something] from left to right",
        },
        {"id": "12", "label": "approaching a tree", "template": "Approaching [something] with your camera"},
    ]
    (tmp_path / "something-something-v2-train.json").write_text(json.dumps(train))
    validation = [{"id": "13", "label": "x", "template": "Approaching [something] with your camera"}]
    (tmp_path / "something-something-v2-validation.json").write_text(json.dumps(validation))
    (tmp_path / "something-something-v2-test.json").write_text(json.dumps([{"id": "14"}]))
    for video_id in ("11", "12", "13", "14"):
        touch(tmp_path / "20bn-something-something-v2" / f"{video_id}.webm")
    source = read_source(tmp_path, "ssv2")
    assert source.class_names == [
        "Approaching something with your camera",
        "Pushing something from left to right",
    ]
    assert [(r.key, r.label, r.split) for r in source.records] == [
        ("11", 1, "train"),
        ("12", 0, "train"),
        ("13", 0, "validation"),
    ]
    assert source.records[0].path == tmp_path / "20bn-something-something-v2/11.webm"


def test_generic_csv_with_and_without_split_column(tmp_path: Path) -> None:
    (tmp_path / "with_split.csv").write_text("path,label,split\nclips/a.mp4,10,train\nclips/b.mp4,2,test\n")
    source = read_source(tmp_path / "with_split.csv", "csv")
    assert source.class_names == ["2", "10"]  # integer names sort numerically
    assert [(r.key, r.path, r.label, r.split) for r in source.records] == [
        ("clips/a", tmp_path / "clips/a.mp4", 1, "train"),
        ("clips/b", tmp_path / "clips/b.mp4", 0, "test"),
    ]
    (tmp_path / "plain.csv").write_text("label,path\nrun,x.mp4\n")
    plain = read_source(tmp_path / "plain.csv", "csv", video_root=tmp_path / "elsewhere")
    assert plain.records[0].split == "train"
    assert plain.records[0].path == tmp_path / "elsewhere/x.mp4"


def test_bad_inputs_name_the_problem(tmp_path: Path) -> None:
    (tmp_path / "bad.csv").write_text("file,class\nx.mp4,a\n")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['label', 'path'\]"):
        read_source(tmp_path / "bad.csv", "csv")
    with pytest.raises(FileNotFoundError, match="no such dataset"):
        read_source(tmp_path / "nope", "folder")
    with pytest.raises(ValueError, match=r"labels\.json"):
        read_source(tmp_path, "ssv2")


# --- folders: every file is a record or ignored with its reason (issue 16) -------------------------


def ignored_reasons(source: Source) -> dict[str, str]:
    return {item.path.relative_to(source.root).as_posix(): item.reason for item in source.ignored}


def test_a_stray_video_in_a_split_folder_is_ignored_and_keeps_the_split_layout(tmp_path: Path) -> None:
    for relative in ["train/x.webm", "train/cat/a.mp4", "train/dog/b.mp4", "val/cat/c.mp4"]:
        touch(tmp_path / relative)
    source = read_source(tmp_path, "folder")
    assert source.splits == ["train", "val"]
    assert source.class_names == ["cat", "dog"]
    assert [record.key for record in source.records] == ["train/cat/a", "train/dog/b", "val/cat/c"]
    assert ignored_reasons(source) == {
        "train/x.webm": "stray video: not in a class folder (the layout is <split>/<class>/<video>)"
    }


def test_every_file_under_the_root_is_a_record_or_ignored_with_its_reason(tmp_path: Path) -> None:
    for relative in [
        *("cat/a.mp4", "cat/b.ts", "cat/c.mpg", "cat/extra/d.mp4", "cat/notes.txt", "cat/README"),
        *("dog/e.mp4", "dog/.DS_Store", ".thumbnails/t.mp4", "f.mp4"),
    ]:
        touch(tmp_path / relative)
    (tmp_path / "dog/x.mp4").mkdir()
    (tmp_path / "dog/gone.mp4").symlink_to(tmp_path / "nowhere.mp4")
    (tmp_path / "dog/loop").symlink_to(tmp_path)
    source = read_source(tmp_path, "folder")
    assert source.class_names == ["cat", "dog"]  # ".thumbnails" is no class
    assert {record.key: record.problem for record in source.records} == {
        "cat/a": None,
        "cat/b": None,
        "cat/c": None,
        "dog/e": None,
        "dog/gone": "missing: broken symlink",
        "dog/x": "unreadable: a folder named like a video",
    }
    assert ignored_reasons(source) == {
        ".thumbnails": "hidden",
        "cat/extra/d.mp4": "nested folder: only <class>/<video> is read",
        "cat/notes.txt": "not a video file (.txt)",
        "cat/README": "not a video file (no extension)",
        "dog/.DS_Store": "hidden",
        "dog/loop": "symlink loop: leads back to an enclosing folder",
        "f.mp4": "stray video: not in a class folder (the layout is <class>/<video>)",
    }


# (format, codec, fps) of containers people have besides MP4/WebM/MKV/AVI
CONTAINERS = {
    "a.ts": ("mpegts", "libx264", 12),
    "b.mpg": ("mpeg", "mpeg1video", 25),
    "c.mpeg": ("mpeg", "mpeg2video", 12),
    "d.3gp": ("3gp", "mpeg4", 12),
    "e.flv": ("flv", "flv1", 12),
    "f.wmv": ("asf", "wmv2", 12),
    "g.ogv": ("ogg", "libvpx", 12),
}


def test_other_containers_are_sharded_and_ignored_files_are_written_and_counted(tmp_path: Path) -> None:
    clips = tmp_path / "videos/clips"
    clips.mkdir(parents=True)
    for name, (container, codec, fps) in CONTAINERS.items():
        (clips / name).write_bytes(encode(moving_frames(12, 64, 48), container, codec, fps=fps))
    (clips / "notes.txt").write_text("not a video")
    cfg = ShardConfig(source=tmp_path / "videos", format="folder", output=tmp_path / "shards", processes=1)
    manifests = shard_dataset(cfg).manifests
    assert (manifests["train"].num_samples, manifests["train"].rejects) == (7, [])
    ignored = [json.loads(line) for line in (cfg.output / "ignored.jsonl").read_text().splitlines()]
    assert ignored == [{"path": "clips/notes.txt", "reason": "not a video file (.txt)"}]
    assert shard_summary(cfg.output, manifests) == (
        f"8 found: 7 sharded, 0 rejected, 1 ignored (see {cfg.output / 'ignored.jsonl'})"
    )


def test_the_same_stem_in_two_containers_keeps_both_videos(tmp_path: Path) -> None:
    for relative in ["cat/a.mp4", "cat/a.webm", "cat/b.mp4"]:
        touch(tmp_path / relative)
    source = read_source(tmp_path, "folder")
    assert [(record.key, record.problem) for record in source.records] == [
        ("cat/a.mp4", None),
        ("cat/a.webm", None),
        ("cat/b", None),  # no collision: the key stays what it always was
    ]
    (tmp_path / "list.csv").write_text("path,label\ncat/a.mp4,x\ncat/a.webm,x\ncat/a.mp4,x\n")
    listed = read_source(tmp_path / "list.csv", "csv")
    assert [(record.key, record.problem) for record in listed.records] == [
        ("cat/a.mp4", None),
        ("cat/a.webm", None),
        ("cat/a.mp4", "duplicate key: 'cat/a.mp4' (list.csv:4) is already listed at list.csv:2"),
    ]


def test_split_names_are_normalised(tmp_path: Path) -> None:
    for relative in ["Train/cat/a.mp4", "train/cat/b.mp4", "VAL/cat/c.mp4"]:
        touch(tmp_path / relative)
    assert read_source(tmp_path, "folder").splits == ["train", "val"]
    (tmp_path / "list.csv").write_text("path,label,split\na.mp4,x,Train\nb.mp4,x, train \nc.mp4,x,VAL\n")
    assert read_source(tmp_path / "list.csv", "csv").splits == ["train", "val"]


def test_file_names_that_are_not_utf8_are_listed(tmp_path: Path) -> None:
    folder = tmp_path / os.fsdecode(b"caf\xe9")
    video = touch(folder / os.fsdecode(b"\xff.mp4"))
    source = read_source(tmp_path, "folder")
    assert [record.path for record in source.records] == [video]
    assert source.records[0].path.is_file()
    json.dumps([source.records[0].key, source.class_names])  # representable in JSON (escaped)


def read_folder_without_read_permission(root: Path, prefix: list[str]) -> dict[str, list]:
    """read_source(root, "folder") in a child that file permissions apply to (conftest's
    `file_permissions_apply` gives the `prefix`)."""
    script = (
        "import json, sys; from vidtx.shard.sources import read_source; s = read_source(sys.argv[1], 'folder');"
        "print(json.dumps({'keys': [r.key for r in s.records], 'ignored': [[str(i.path), i.reason] for i in s.ignored]}))"
    )
    command = [*prefix, sys.executable, "-c", script, str(root)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_an_unreadable_class_folder_is_ignored_and_the_rest_is_read(
    tmp_path: Path, file_permissions_apply: list[str]
) -> None:
    touch(tmp_path / "cat/a.mp4")
    touch(tmp_path / "dog/b.mp4")
    (tmp_path / "dog").chmod(0o000)
    try:
        read = read_folder_without_read_permission(tmp_path, file_permissions_apply)
    finally:
        (tmp_path / "dog").chmod(0o755)
    assert read == {
        "keys": ["cat/a"],
        "ignored": [[str(tmp_path / "dog"), "unreadable folder: permission denied"]],
    }


@pytest.mark.parametrize("source", ["empty_folder", "header_only.csv", "only_notes"])
def test_nothing_to_shard_is_a_one_line_error_naming_the_source(tmp_path: Path, source: str) -> None:
    (tmp_path / "empty_folder").mkdir()
    (tmp_path / "header_only.csv").write_text("path,label\n")
    touch(tmp_path / "only_notes/cat/notes.txt")
    path = tmp_path / source
    with pytest.raises(NothingToShardError) as error:
        read_source(path, "csv" if source.endswith(".csv") else "folder")
    message = str(error.value)
    assert message.startswith(f"{path}: nothing to shard: no videos or annotation rows found")
    assert "\n" not in message
    if source == "only_notes":
        assert message.endswith(
            "1 file(s) ignored, e.g. " + f"{path / 'cat/notes.txt'} (not a video file (.txt))"
        )
