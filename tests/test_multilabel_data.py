"""Several labels per video, the data side (issue 60, point 1): label sets read from a CSV with a
separator, a Kinetics CSV and the json list format; bad label lists as rejects; manifests and samples
that record label sets; loaders that give multi-hot targets, or refuse label sets without multi_label."""

import json
import tarfile
from pathlib import Path

import pytest
import torch
from media import pattern_frames

from vidtx.config import DataConfig, ShardConfig
from vidtx.data.eval_loader import build_eval_loader
from vidtx.data.labels import MultiLabelSampleError, label_target
from vidtx.data.train_loader import build_train_loader
from vidtx.manifest import Manifest, load_manifest
from vidtx.media.encode import encode_mp4
from vidtx.shard.sources import UNLABELLED, read_source
from vidtx.stages.shard import shard_dataset

CLASSES = ["bird", "cat", "dog"]
GOOD = {  # key -> (split, label field), sharded with label_separator "|"
    "v0": ("train", "cat|dog"),
    "v1": ("train", "dog"),
    "v2": ("train", " bird | cat | bird "),  # stripped, the repeat dropped
    "v3": ("train", "dog|bird|cat"),
    "v4": ("train", "cat"),
    "v5": ("train", "bird|dog"),
    "w0": ("val", "cat|bird"),
    "w1": ("val", "dog"),
}
BAD = {"v6": ("train", "|"), "v7": ("train", "cat|fish")}  # an empty label list, an unknown label


def expected_labels(field: str) -> set[str]:
    return {name.strip() for name in field.split("|")}


def multi_hot(field: str) -> list[float]:
    return [float(name in expected_labels(field)) for name in CLASSES]


def write_videos(folder: Path, keys: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for key in keys:
        (folder / f"{key}.mp4").write_bytes(encode_mp4(pattern_frames(8, 32, 32), 8))


@pytest.fixture(scope="module")
def multi_label_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shards of `GOOD` and `BAD`, written with label_separator "|" and the label set `CLASSES`."""
    root = tmp_path_factory.mktemp("multi_label")
    write_videos(root / "videos", [*GOOD, *BAD])
    rows = [f'{key}.mp4,"{label}",{split}' for key, (split, label) in (GOOD | BAD).items()]
    (root / "videos/annotations.csv").write_text("path,label,split\n" + "\n".join(rows) + "\n")
    shard_dataset(
        ShardConfig(
            source=root / "videos/annotations.csv",
            output=root / "shards",
            label_separator="|",
            classes=CLASSES,
            max_samples_per_shard=3,
            max_reject_fraction=0.5,
            processes=1,
        )
    )
    return root / "shards"


def sample_metas(shards: Path, split: str) -> dict[str, dict]:
    metas = {}
    for tar in sorted(shards.glob(f"{split}-*.tar")):
        with tarfile.open(tar) as archive:
            for member in archive.getmembers():
                if member.name.endswith(".json"):
                    meta = json.loads(archive.extractfile(member).read())  # type: ignore[union-attr]
                    metas[meta["key"]] = meta
    return metas


def loader_config(shards: Path) -> DataConfig:
    return DataConfig(
        shards=shards, num_frames=2, short_side=32, crop_size=28, num_workers=0, shuffle_buffer=4
    )


# --- reading annotations ----------------------------------------------------------------------------


def test_a_csv_with_a_label_separator_reads_label_sets(tmp_path: Path) -> None:
    (tmp_path / "list.csv").write_text(
        'path,label,split\na.mp4,"dog| cat",train\nb.mp4,cat,val\nc.mp4,"cat|cat|bird",train\n'
    )
    source = read_source(tmp_path / "list.csv", "csv", label_separator="|")
    assert source.multi_label
    assert source.class_names == ["bird", "cat", "dog"]
    assert [(r.key, r.labels, r.label, r.split, r.problem) for r in source.records] == [
        ("a", (2, 1), 2, "train", None),  # written order kept; `label` is the first
        ("b", (1,), 1, "val", None),
        ("c", (1, 0), 1, "train", None),
    ]
    single = read_source(tmp_path / "list.csv", "csv")  # no separator: one label per row, as ever
    assert not single.multi_label
    assert single.class_names == ["cat", "cat|cat|bird", "dog| cat"]
    assert {record.labels for record in single.records} == {None}


def test_a_kinetics_csv_with_a_label_separator_reads_label_sets(tmp_path: Path) -> None:
    (tmp_path / "k.csv").write_text(
        "label,youtube_id,time_start,time_end,split\n"
        '"run|jump",aaa,0,10,train\n'
        "jump,bbb,5,15,train\n"
        '"|",ccc,0,10,train\n'
    )
    source = read_source(tmp_path / "k.csv", "kinetics", label_separator="|")
    assert source.multi_label
    assert source.class_names == ["jump", "run"]
    records = {record.key: record for record in source.records}
    assert records["aaa_000000_000010"].labels == (1, 0)
    assert records["bbb_000005_000015"].labels == (0,)
    assert records["k.csv:4"].problem == "empty label list (k.csv:4: '|')"


def test_the_json_format_reads_names_and_lists_of_names(tmp_path: Path) -> None:
    rows = [
        {"path": "a.mp4", "label": ["dog", "cat"]},
        {"path": "b.mp4", "label": "cat", "split": "Val"},
        {"path": "../c.mp4", "label": "cat"},
        {"path": "d.mp4", "label": []},
        {"path": "e.mp4", "label": ""},
        {"path": "f.mp4", "label": ["cat", 3]},
        "g.mp4",
        {"path": "h.mp4", "label": ["cat", "fish"]},
    ]
    (tmp_path / "list.json").write_text(json.dumps(rows))
    source = read_source(tmp_path / "list.json", "json", classes=["cat", "dog"])
    assert source.multi_label
    assert [(r.key, r.labels, r.split, r.problem) for r in source.records] == [
        ("a", (1, 0), "train", None),
        ("b", (0,), "val", None),
        (
            "list.json[2]",
            (0,),
            "train",
            f"outside the video root: '../c.mp4' (list.json[2]) is not inside {tmp_path}",
        ),
        ("list.json[3]", (), "train", "empty label list (list.json[3]: [])"),
        ("list.json[4]", (), "train", "empty label list (list.json[4]: '')"),
        (
            "list.json[5]",
            (),
            "train",
            "malformed row: list.json[5] has a 'label' that is not a name or a list of names",
        ),
        ("list.json[6]", (), "train", "malformed row: list.json[6] is not an object"),
        (
            "h",
            (0, UNLABELLED),
            "train",
            "unknown label: 'fish' (list.json[7]) is not in the given classes",
        ),
    ]
    (tmp_path / "names.json").write_text(json.dumps([{"path": "a.mp4", "label": "dog"}]))
    names = read_source(tmp_path / "names.json", "json")  # names only: single-label, like a csv
    assert not names.multi_label
    assert [(r.key, r.label, r.labels) for r in names.records] == [("a", 0, None)]


def test_label_separator_is_refused_where_no_label_column_is_split() -> None:
    with pytest.raises(ValueError, match="label_separator applies to formats csv and kinetics, not folder"):
        ShardConfig(format="folder", label_separator="|")
    with pytest.raises(ValueError, match="label_separator"):
        ShardConfig(label_separator="")


# --- shards and manifests ---------------------------------------------------------------------------


def test_multi_label_shards_record_label_sets_and_reject_bad_lists(multi_label_shards: Path) -> None:
    train = load_manifest(multi_label_shards, "train")
    assert train.multi_label
    assert train.class_names == CLASSES
    written = [label for split, label in GOOD.values() if split == "train"]
    assert train.counts_per_class == {
        name: sum(name in expected_labels(label) for label in written) for name in CLASSES
    }  # every label of a video counts
    assert train.num_samples == 6
    assert sorted(reject.reason for reject in train.rejects) == [
        "empty label list (annotations.csv:10: '|')",
        "unknown label: 'fish' (annotations.csv:11) is not in the given classes",
    ]
    metas = sample_metas(multi_label_shards, "train") | sample_metas(multi_label_shards, "val")
    for key, (_, label) in GOOD.items():
        meta = metas[key]
        assert set(meta["label_names"]) == expected_labels(label)
        assert [CLASSES[i] for i in meta["labels"]] == meta["label_names"]
        assert (meta["label"], meta["label_name"]) == (meta["labels"][0], meta["label_names"][0])


def test_single_label_shards_keep_their_samples_and_old_manifests_load(tmp_path: Path) -> None:
    write_videos(tmp_path / "videos", ["a", "b"])
    (tmp_path / "videos/list.csv").write_text("path,label\na.mp4,cat\nb.mp4,dog\n")
    outcome = shard_dataset(ShardConfig(source=tmp_path / "videos/list.csv", output=tmp_path / "shards"))
    manifest = outcome.manifests["train"]
    assert not manifest.multi_label
    assert {tuple(sorted(meta)) for meta in sample_metas(tmp_path / "shards", "train").values()} == {
        (
            "duration",
            "fps",
            "frames",
            "height",
            "key",
            "label",
            "label_name",
            "open_gop",
            "reencoded",
            "source",
            "store",
            "width",
        )
    }
    old = json.loads(manifest.model_dump_json())
    del old["multi_label"]  # a manifest written before label sets existed
    assert not Manifest.model_validate(old).multi_label


# --- loaders ----------------------------------------------------------------------------------------


@pytest.mark.usefixtures("single_process")
def test_multi_label_loaders_give_the_annotations_as_multi_hot_vectors(multi_label_shards: Path) -> None:
    cfg = loader_config(multi_label_shards)
    epoch = list(build_train_loader(cfg, batch_size=2, seed=0, multi_label=True))
    assert len(epoch) == 3
    for clips, labels, keys in epoch:
        assert clips.shape[0] == 2
        assert labels.dtype == torch.float32
        assert labels.shape == (2, 3)
        assert labels.tolist() == [multi_hot(GOOD[key][1]) for key in keys]
    ((_, labels, keys),) = build_eval_loader(cfg, "train", batch_size=8, multi_label=True)  # every sample
    assert sorted(keys) == [key for key, (split, _) in GOOD.items() if split == "train"]
    assert labels.tolist() == [multi_hot(GOOD[key][1]) for key in keys]
    ((_, labels, keys),) = build_eval_loader(cfg, "val", batch_size=4, multi_label=True)
    assert sorted(keys) == ["w0", "w1"]
    assert labels.dtype == torch.float32
    assert labels.tolist() == [multi_hot(GOOD[key][1]) for key in keys]
    # the model's label set (another order, one more class): the same labels by name
    model_classes = ["dog", "fish", "cat", "bird"]
    (_, labels, keys), *_ = build_eval_loader(
        cfg, "val", batch_size=4, class_names=model_classes, multi_label=True
    )
    assert labels.tolist() == [
        [float(name in expected_labels(GOOD[key][1])) for name in model_classes] for key in keys
    ]


@pytest.mark.usefixtures("single_process")
def test_a_single_label_loader_refuses_a_sample_with_several_labels(multi_label_shards: Path) -> None:
    cfg = loader_config(multi_label_shards)
    message = r"split '(train|val)': sample .*\.tar:\d+ \(\w+\.mp4\) has \d labels \(.*\).*set model\.task=multi_label"
    with pytest.raises(MultiLabelSampleError, match=message):
        list(build_train_loader(cfg, batch_size=2, seed=0))
    with pytest.raises(MultiLabelSampleError, match=message):
        list(build_eval_loader(cfg, "val", batch_size=4))


@pytest.mark.usefixtures("single_process")
def test_single_label_samples_are_one_hot_in_a_multi_label_loader(tmp_path: Path) -> None:
    write_videos(tmp_path / "videos", ["a", "b", "c"])
    (tmp_path / "videos/list.csv").write_text("path,label\na.mp4,cat\nb.mp4,dog\nc.mp4,bird\n")
    shard_dataset(ShardConfig(source=tmp_path / "videos/list.csv", output=tmp_path / "shards"))
    cfg = loader_config(tmp_path / "shards")
    (_, labels, keys), *_ = build_eval_loader(cfg, "train", batch_size=3, multi_label=True)
    names = {"a": "cat", "b": "dog", "c": "bird"}
    assert labels.tolist() == [multi_hot(names[key]) for key in keys]
    (_, ids, keys), *_ = build_eval_loader(cfg, "train", batch_size=3)
    assert ids.dtype == torch.int64
    assert ids.tolist() == [CLASSES.index(names[key]) for key in keys]


def test_label_targets_map_a_splits_ids_into_the_label_set() -> None:
    meta = {"label": 0, "labels": [0, 2], "label_names": ["a", "c"]}
    target = label_target(meta, [3, 0, 1], 4, True, "here")  # the split's ids 0, 1, 2 -> 3, 0, 1
    assert target.dtype == torch.float32
    assert target.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert label_target({"label": 1}, [3, 0, 1], 4, False, "here") == 0
    assert label_target({"label": -1}, [], 4, True, "here").tolist() == [0.0] * 4  # unlabeled: no class
    with pytest.raises(MultiLabelSampleError, match=r"^here has 2 labels \(a, c\)"):
        label_target(meta, [3, 0, 1], 4, False, "here")
