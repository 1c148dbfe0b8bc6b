import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from vidtx import storage
from vidtx.tracking.runs import connect

DEMO = Path(__file__).resolve().parent.parent / "configs/experiments/demo.yaml"
COMMANDS = [
    "synth",
    "shard",
    "inspect",
    "train",
    "evaluate",
    "register",
    "predict",
    "pipeline",
    "models",
    "plan",
]


def test_help_lists_the_commands(vidtx) -> None:
    result = vidtx("--help")
    assert result.returncode == 0
    for command in [*COMMANDS, "config"]:
        assert command in result.stdout


def test_config_show_prints_resolved_yaml_with_override(vidtx) -> None:
    result = vidtx("config", "show", str(DEMO), "--set", "train.optimizer.lr=0.1")
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert resolved["train"]["optimizer"]["lr"] == 0.1
    assert resolved["train"]["optimizer"]["name"] == "adamw"  # from the file
    assert resolved["eval"]["num_crops"] == 3  # filled-in default


def test_bad_override_exits_nonzero_with_one_line_naming_the_field(vidtx) -> None:
    for override, field in [
        ("train.nope=1", "train.nope"),
        ("train.optimizer.lr=abc", "train.optimizer.lr"),
        ("model.name=xvit_huge", "model.name"),  # checked against the zoo where the config is loaded
        ("model.options={shift_dvi: 4}", "model.options"),
    ]:
        result = vidtx("config", "show", str(DEMO), "--set", override)
        assert result.returncode != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1
        assert field in lines[0]
        assert result.stdout == ""


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *names: str) -> str:
    """The command failed with `code` and one `error:` line on stderr naming every one of `names`."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for name in names:
        assert name in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("text", "problem"),
    [(b"include: 5\n", "include: "), (b"include: [null]\n", "include: "), (b"name: caf\xe9\n", "UTF-8")],
    ids=["include_number", "include_null", "latin1"],
)
def test_unusable_config_files_are_one_line_with_exit_code_2(
    vidtx, tmp_path: Path, text: bytes, problem: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(text)
    assert_one_line_error(vidtx("config", "show", str(path)), 2, str(path), problem)


def test_a_model_that_cannot_be_built_fails_before_anything_starts(vidtx, tmp_path: Path) -> None:
    """A crop size that is not a multiple of the patch size used to fail after 36 s in the Ray workers."""
    started = time.monotonic()
    result = vidtx("train", str(DEMO), "--set", "data.crop_size=60", "--set", f"workdir={tmp_path}/work")
    assert_one_line_error(result, 2, "data.crop_size=60", "not a multiple of patch_size 8")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "work").exists()


@pytest.fixture
def class_folders(tmp_path: Path, write_mp4: Callable[..., Path]) -> Path:
    """ROOT/<class>/<video>: two real MP4 files, the layout of shard.format=folder."""
    for name in ("left", "right"):
        write_mp4(tmp_path / "videos" / name / "clip.mp4", num_frames=4, width=32, height=32)
    return tmp_path / "videos"


def test_shard_arguments_that_do_not_fit_are_one_line_with_exit_code_2(
    vidtx, class_folders: Path, tmp_path: Path
) -> None:
    output = tmp_path / "shards"
    folder = "--set", "shard.format=folder"
    cases = [
        ((str(class_folders), str(output)), ("shard.source", "shard.format=folder")),  # no format
        ((str(class_folders / "left" / "clip.mp4"), str(output), *folder), ("shard.source", "a file")),
        ((str(class_folders), str(class_folders / "left" / "clip.mp4"), *folder), ("shard.output", "a file")),
    ]
    for arguments, names in cases:
        assert_one_line_error(vidtx("shard", *arguments, "--set", "shard.processes=1"), 2, *names)
    assert not output.exists()
    shard_args = (str(class_folders), str(output), *folder, "--set", "shard.processes=1")
    assert vidtx("shard", *shard_args).returncode == 0  # the same folder with the format shards


def test_missing_shards_are_one_line_before_the_tracking_store_is_made(vidtx, tmp_path: Path) -> None:
    result = vidtx(
        "train", str(DEMO), "--set", f"data.shards={tmp_path}/nope", "--set", f"workdir={tmp_path}/work"
    )
    assert_one_line_error(result, 1, f"data.shards {tmp_path}/nope", "vidtx shard")
    assert not (tmp_path / "work").exists()


def test_predict_names_the_registry_it_looked_in_and_creates_none(vidtx, tmp_path: Path) -> None:
    absent = f"sqlite:///{tmp_path}/runs/mlflow.db"
    line = assert_one_line_error(vidtx("predict", "clip.mp4", "--tracking-uri", absent), 1, absent)
    assert "point --tracking-uri (or MLFLOW_TRACKING_URI)" in line
    assert not (tmp_path / "runs").exists()  # no empty store left behind
    empty = f"sqlite:///{tmp_path}/mlflow.db"
    connect(empty)  # a store without the model
    result = vidtx("predict", "clip.mp4", "--model", "models:/nobody@champion", "--tracking-uri", empty)
    assert_one_line_error(
        result, 1, "models:/nobody@champion", f"not found in the MLflow registry at {empty}"
    )


@pytest.mark.slow
def test_predict_prints_every_good_file_and_reports_each_bad_one(
    vidtx, registered_model: str, tmp_path: Path, write_mp4: Callable[..., Path]
) -> None:
    good = [write_mp4(tmp_path / f"good{i}.mp4", num_frames=8, width=32, height=32) for i in (1, 2)]
    text = tmp_path / "notes.txt"
    text.write_text("not a video\n")
    empty = tmp_path / "empty"  # a folder is read as the videos under it: none here
    empty.mkdir()
    videos = [good[0], tmp_path / "missing.mp4", text, empty, good[1]]
    model = ("--model", "models:/predict-test@champion", "--tracking-uri", registered_model)
    result = vidtx("predict", *map(str, videos), *model, "--top-k", "2")
    assert result.returncode == 1, result.stderr
    *printed, summary = [line for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert printed == [str(good[0]), str(good[1])]  # the file after the bad ones too
    assert len(result.stdout.splitlines()) == 7  # two classes under each, and the summary
    assert summary == "5 videos scored by models:/predict-test/1, 3 unreadable"
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors[:3] == [
        f"error: {tmp_path / 'missing.mp4'}: No such file or directory",
        errors[1],
        f"error: {empty}: Is a directory",
    ]
    assert errors[1].startswith(f"error: {text}: ")
    assert errors[3:] == ["error: 3 of 5 videos could not be read"]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_predict_reads_videos_in_a_bucket(
    vidtx, registered_model: str, bucket: str, tmp_path: Path, write_mp4: Callable[..., Path]
) -> None:
    good = f"{bucket}/videos/good.mp4"
    storage.upload(write_mp4(tmp_path / "good.mp4", num_frames=8, width=32, height=32), good)
    model = ("--model", "models:/predict-test@champion", "--tracking-uri", registered_model)
    result = vidtx("predict", good, f"{bucket}/videos/gone.mp4", *model, "--top-k", "2")
    assert result.returncode == 1, result.stderr
    assert [line for line in result.stdout.splitlines() if not line.startswith(" ")][:-1] == [good]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: {bucket}/videos/gone.mp4: no such object",
        "error: 1 of 2 videos could not be read",
    ]
