"""Unlabeled videos (`shard.format: unlabeled`): sharded without labels for pretraining, refused in one
line by training and evaluation."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vidtx.config import ConfigError, DataConfig, PipelineConfig, ShardConfig
from vidtx.manifest import load_manifest
from vidtx.stages.shard import shard_dataset
from vidtx.train.splits import evaluation_split, training_splits

ROOT = Path(__file__).resolve().parent.parent


def test_every_video_of_a_folder_is_sharded_without_labels_split_by_its_top_folders(
    synthetic_shards: tuple[Path, Path], tmp_path: Path
) -> None:
    videos, _ = synthetic_shards  # <split>/<class>/<video>.mp4 and annotations.csv
    outcome = shard_dataset(ShardConfig(source=videos, format="unlabeled", output=tmp_path, processes=1))
    train, val = outcome.manifests["train"], outcome.manifests["val"]
    assert (train.num_samples, val.num_samples) == (24, 12)  # every video, at any depth
    assert (train.class_names, val.class_names, train.counts_per_class) == ([], [], {})
    ignored = [json.loads(line) for line in (tmp_path / "ignored.jsonl").read_text().splitlines()]
    assert ignored == [{"path": "annotations.csv", "reason": "not a video file"}]


def test_a_list_of_videos_is_sharded_without_labels(
    synthetic_shards: tuple[Path, Path], tmp_path: Path
) -> None:
    videos, _ = synthetic_shards
    listed = sorted(path.relative_to(videos) for path in videos.rglob("*.mp4"))[:5]
    (tmp_path / "list.csv").write_text(
        "path\n" + "".join(f"{videos / p}\n" for p in listed) + "missing.mp4\n"
    )
    shutil.copytree(videos, tmp_path / "videos")
    config = ShardConfig(source=tmp_path / "list.csv", format="unlabeled", output=tmp_path / "shards",
                         video_root=videos, processes=1, max_reject_fraction=0.5)  # fmt: skip
    manifest = shard_dataset(config).manifests["train"]
    assert (manifest.num_samples, manifest.class_names) == (5, [])
    assert [reject.path for reject in manifest.rejects] == ["missing.mp4"]


def test_training_and_evaluation_refuse_unlabeled_shards_in_one_line(unlabeled_shards: Path) -> None:
    data = DataConfig(shards=unlabeled_shards)
    with pytest.raises(ConfigError, match=r"data.shards: split 'train' has no labels .*`vidtx pretrain`"):
        training_splits(data)
    training, validation = training_splits(data, labeled=False)  # what pretraining reads
    assert (training.class_names, validation.split) == ([], "val")
    config = PipelineConfig(data=data)
    config.eval.split = "val"
    with pytest.raises(ConfigError, match="split 'val' has no labels"):
        evaluation_split(config)
    assert load_manifest(unlabeled_shards, "val").num_samples == 12


def test_vidtx_train_on_unlabeled_shards_is_one_line_before_anything_starts(
    unlabeled_shards: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"include: {ROOT / 'configs/experiments/demo.yaml'}\nworkdir: {tmp_path}\n")
    done = subprocess.run(
        [sys.executable, "-m", "vidtx", "train", str(config), f"--set=data.shards={unlabeled_shards}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: data.shards: split 'train' has no labels (sharded with shard.format: unlabeled): training "
        "and evaluation need labelled shards; pretrain on it with `vidtx pretrain`"
    ]
    assert not (tmp_path / "mlflow.db").exists()  # before the tracking store, Ray and any worker
