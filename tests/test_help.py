"""Every command's --help against the schema: the settings it reads, each with its type or choices
and default, come from vidtx.config.fields, and a mistyped --set key names the keys nearby."""

import re

import click
import pytest
import typer
from typer.testing import CliRunner

from vidtx.cli import app
from vidtx.config import load_config
from vidtx.config.base import ConfigError
from vidtx.config.fields import COMMAND_SECTIONS, SECTIONS, settings

WIDE = {"COLUMNS": "400"}  # no wrapping inside the type and default columns
ROW = re.compile(r"^│ (\S+)\s{2,}")


def commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every command of the CLI by its full name (`config show`)."""
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= commands(command, f"{prefix}{name} ")
        else:
            found[prefix + name] = command
    return found


def help_text(name: str) -> str:
    result = CliRunner().invoke(app, [*name.split(), "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    return result.output


def listed_settings(text: str) -> list[str]:
    """The first column of every settings row (the header rows say `setting`)."""
    return [m.group(1) for line in text.splitlines() if (m := ROW.match(line)) and m.group(1) != "setting"]


ALL_COMMANDS = commands(typer.main.get_command(app))


@pytest.mark.parametrize("name", sorted(ALL_COMMANDS))
def test_every_command_that_takes_set_lists_the_settings_it_reads(name: str) -> None:
    text = help_text(name)
    takes_set = any("--set" in param.opts for param in ALL_COMMANDS[name].params)
    if not takes_set:
        assert name not in COMMAND_SECTIONS
        assert "Settings it reads" not in text
        return
    expected = settings(COMMAND_SECTIONS[name])
    assert expected
    assert listed_settings(text.split("Settings it reads")[1]) == [setting.key for setting in expected]
    for setting in expected:
        cells = rf"│ {re.escape(setting.key)}\s+{re.escape(setting.kind)}\s+{re.escape(setting.default)}\s"
        assert re.search(cells, text), f"{name}: {setting.key} row"


def test_shard_help_lists_the_format_choices_and_train_help_the_step_count() -> None:
    assert re.search(
        r"│ shard\.format\s+folder\|kinetics\|ssv2\|csv\|json\|unlabeled\s+csv\s+Layout", help_text("shard")
    )
    train_help = help_text("train")
    assert re.search(r"│ train\.max_steps\s+int\s+100\s+Optimizer steps", train_help)
    assert "shard.format" not in train_help  # training does not read the shard section


def test_every_setting_has_a_description_and_config_fields_prints_each() -> None:
    everything = settings()
    assert [setting.key for setting in everything if not setting.description] == []
    result = CliRunner().invoke(app, ["config", "fields"], env=WIDE)
    assert result.exit_code == 0
    assert listed_settings(result.output) == [setting.key for setting in everything]
    assert len(everything) > 100
    assert {setting.section for setting in everything} == set(SECTIONS)


def test_config_fields_of_one_section_and_an_unknown_section(vidtx) -> None:
    result = CliRunner().invoke(app, ["config", "fields", "eval"], env=WIDE)
    assert listed_settings(result.output) == [setting.key for setting in settings(["eval"])]
    unknown = vidtx("config", "fields", "evaluation")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        f"error: no config section evaluation; the sections: {', '.join(SECTIONS)}"
    ]


@pytest.mark.parametrize(
    ("override", "field", "suggested"),
    [
        ("train.max_step=3", "train.max_step", "train.max_steps"),
        ("trian.max_steps=3", "trian", "train"),
        ("shard.reencode.shortside=128", "shard.reencode.shortside", "shard.reencode.short_side"),
        ("eval.zzz=1", "eval.zzz", "eval.split"),  # nothing alike: the keys beside it
    ],
)
def test_a_mistyped_key_names_the_keys_nearby(override: str, field: str, suggested: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, [override])
    message = str(raised.value)
    assert f"--set {override}: {field}: no such setting; nearby: " in message
    assert suggested in message.partition("nearby: ")[2].partition(" (")[0].split(", ")


@pytest.mark.parametrize("columns", [80, 100, 132, 200])
@pytest.mark.parametrize("name", sorted(COMMAND_SECTIONS))
def test_at_any_width_from_80_every_setting_reads_whole(name: str, columns: int) -> None:
    """Issue 43 case 4: at 80 columns (a non-TTY's width) every description was cut to "…" and the
    choices wrapped. Now each key, type or choices and default stands whole on one line, and each
    description is there word for word (beside them where the table fits, else below them)."""
    result = CliRunner().invoke(app, [*name.split(), "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    text = result.output.split("Settings it reads")[1]
    assert "…" not in text
    assert max(map(len, text.splitlines())) <= columns
    lines = [line.strip("│ ") for line in text.splitlines()]
    words = " ".join(" ".join(lines).split())
    for setting in settings(COMMAND_SECTIONS[name]):
        (row,) = [
            i for i, line in enumerate(lines) if re.match(rf"{re.escape(setting.key)}(\s{{2,}}|$)", line)
        ]
        # the key, then its type or choices and its default, each whole: beside it, or on lines below it
        cells = [cell for line in lines[row : row + 3] for cell in re.split(r"\s{2,}", line) if cell]
        assert cells[:2] == [setting.key, setting.kind], setting.key
        assert cells[2] in (setting.default, f"default {setting.default}"), setting.key
        assert " ".join(setting.description.split()) in words, setting.key
