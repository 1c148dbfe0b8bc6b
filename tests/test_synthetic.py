import csv
import hashlib
import logging
import subprocess
import sys
from pathlib import Path

import decord
import numpy as np
import pytest

from vidtx.config import SynthConfig
from vidtx.shard.sources import read_source
from vidtx.shard.synthetic import CLASSES, PAIRS, PARTNER, generate_dataset, render_video


def small_config(output: Path, **changes: object) -> SynthConfig:
    fields = {
        "output": output,
        "classes": ["moving_left", "moving_right", "approaching"],
        "videos_per_class": {"train": 2, "val": 1},
        "num_frames": 8,
        "size": 32,
        "fps": 8,
    }
    return SynthConfig(**(fields | changes))


def test_generate_writes_decodable_mp4s_and_an_annotation_csv(tmp_path: Path) -> None:
    annotations = generate_dataset(small_config(tmp_path))
    with annotations.open() as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 3 * 3
    assert {row["split"] for row in rows} == {"train", "val"}
    assert {row["label"] for row in rows} == {"moving_left", "moving_right", "approaching"}
    for row in rows:
        assert Path(row["path"]).parts[:2] == (row["split"], row["label"])  # also a folder-per-class layout
        reader = decord.VideoReader(str(tmp_path / row["path"]))
        assert len(reader) == 8
        assert reader.get_avg_fps() == pytest.approx(8)
        assert reader.get_batch([0]).asnumpy().shape == (1, 32, 32, 3)


def test_same_seed_writes_the_same_bytes_and_another_seed_does_not(tmp_path: Path) -> None:
    videos = []
    for name, seed in [("a", 0), ("b", 0), ("c", 1)]:
        generate_dataset(small_config(tmp_path / name, seed=seed))
        videos.append(
            sorted((p.relative_to(tmp_path / name), p.read_bytes()) for p in (tmp_path / name).rglob("*.mp4"))
        )
    assert videos[0] == videos[1]
    assert [data for _, data in videos[0]] != [data for _, data in videos[2]]


def test_one_object_per_video_renders_the_frames_it_always_has() -> None:
    """The frames of single-object videos are pinned: the datasets people generated stay the same."""
    cfg = SynthConfig(num_frames=8, size=32)
    frames = b"".join(render_video(cfg, name, "train", 1).tobytes() for name in CLASSES)
    assert (
        hashlib.sha256(frames).hexdigest()
        == "70e60279e2ef32d0883c6852d70e8c1a03053c290710394925364d456c1392ee"
    )


def motion_of(name: str) -> str:
    return next(motion for motion, pair in PAIRS.items() if name in pair)


def test_two_objects_per_video_give_two_labels_of_different_motion_axes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    classes = ["moving_left", "moving_right", "approaching", "growing"]
    with caplog.at_level(logging.INFO, logger="vidtx.shard.synthetic"):
        annotations = generate_dataset(small_config(tmp_path / "a", classes=classes, objects_per_video=2))
    assert """shard it with --set 'shard.label_separator="|"'""" in caplog.text
    with annotations.open() as file:
        rows = list(csv.DictReader(file))
    assert [row["path"] for row in rows] == [f"train/{i:05d}.mp4" for i in range(8)] + [
        f"val/{i:05d}.mp4" for i in range(4)
    ]
    for index, row in enumerate(rows):
        labels = row["label"].split("|")
        assert len(labels) == 2
        assert set(labels) <= set(classes)
        assert classes[index % 4] in labels  # each class leads as many videos as videos_per_class asks
        assert motion_of(labels[0]) != motion_of(labels[1])  # never both classes of a pair
        assert PARTNER[labels[0]] not in labels
        reader = decord.VideoReader(str(tmp_path / "a" / row["path"]))
        assert len(reader) == 8
        assert reader.get_batch([0]).asnumpy().shape == (1, 32, 32, 3)
    source = read_source(annotations, "csv", label_separator="|")
    assert source.multi_label
    assert source.class_names == sorted(classes)
    assert all(record.problem is None and len(record.labels) == 2 for record in source.records)
    generate_dataset(small_config(tmp_path / "b", classes=classes, objects_per_video=2))
    for row in rows:  # the same config, the same bytes
        assert (tmp_path / "a" / row["path"]).read_bytes() == (tmp_path / "b" / row["path"]).read_bytes()


def test_more_objects_than_the_classes_have_motion_axes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="objects_per_video 2 needs classes of as many motion axes"):
        generate_dataset(small_config(tmp_path, classes=["moving_left", "moving_right"], objects_per_video=2))
    with pytest.raises(ValueError, match="less than or equal to 4"):
        SynthConfig(objects_per_video=5)


@pytest.mark.parametrize(("forward", "backward"), list(PAIRS.values()))
def test_a_video_played_backwards_is_the_same_video_of_the_opposite_class(
    forward: str, backward: str
) -> None:
    """Hence frames, singly or as a set, are equally likely under both classes: only order tells."""
    cfg = SynthConfig(num_frames=10, size=48)
    for index in range(3):
        clip = render_video(cfg, forward, "train", index)
        np.testing.assert_array_equal(clip, render_video(cfg, backward, "train", index)[::-1])
        assert np.abs(clip[0].astype(int) - clip[-1].astype(int)).mean() > 2  # the object does move


def test_scenes_vary_between_videos_and_splits() -> None:
    cfg = SynthConfig(num_frames=4, size=32)
    first_frames = [render_video(cfg, "growing", split, i)[0] for split in ("train", "val") for i in range(3)]
    for a in range(len(first_frames)):
        for b in range(a + 1, len(first_frames)):
            assert not np.array_equal(first_frames[a], first_frames[b])


def test_unknown_class_and_odd_size_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown synthetic classes"):
        generate_dataset(small_config(tmp_path, classes=["moving_left", "spinning"]))
    with pytest.raises(ValueError, match="multiple of 2"):
        SynthConfig(size=33)
    assert len(CLASSES) == 8


def test_cli_synth_with_options(tmp_path: Path) -> None:
    overrides = [
        "synth.videos_per_class={train: 2}",
        "synth.classes=[growing, shrinking]",
        "synth.num_frames=6",
        "synth.size=32",
    ]
    command = [sys.executable, "-m", "vidtx", "synth", str(tmp_path / "out")]
    command += [arg for override in overrides for arg in ("--set", override)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    videos = sorted((tmp_path / "out").rglob("*.mp4"))
    assert [p.relative_to(tmp_path / "out").as_posix() for p in videos] == [
        "train/growing/00000.mp4",
        "train/growing/00001.mp4",
        "train/shrinking/00000.mp4",
        "train/shrinking/00001.mp4",
    ]
    assert len(decord.VideoReader(str(videos[0]))) == 6
