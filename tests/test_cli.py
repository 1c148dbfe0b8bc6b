from pathlib import Path

import yaml

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
