import csv
import subprocess
import sys
from pathlib import Path

import decord
import numpy as np
import pytest

from vidtx.config import SynthConfig
from vidtx.shard.synthetic import CLASSES, PAIRS, generate_dataset, render_video


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
