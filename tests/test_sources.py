import json
from pathlib import Path

import pytest

from vidtx.shard.sources import read_source


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
