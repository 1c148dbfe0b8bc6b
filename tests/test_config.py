import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vidtx.config import (
    ConfigError,
    PipelineConfig,
    TrainConfig,
    apply_overrides,
    dump_config,
    load_config,
)
from vidtx.model_factory import check_model_config

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
ALL_YAML = sorted(CONFIGS.rglob("*.yaml"))


def test_configs_folder_has_the_presets() -> None:
    names = {path.relative_to(CONFIGS).as_posix() for path in ALL_YAML}
    assert {
        "experiments/demo.yaml",
        "experiments/ssv2_xvit_b16_8f.yaml",
        "experiments/ssv2_xvit_b16_16f.yaml",
        "experiments/k400_xvit_b16_8f.yaml",
        "experiments/k400_xvit_b16_16f.yaml",
    } <= names


@pytest.mark.parametrize("path", ALL_YAML, ids=lambda p: p.relative_to(CONFIGS).as_posix())
def test_every_config_file_validates(path: Path) -> None:
    assert isinstance(load_config(path), PipelineConfig)


def test_experiment_includes_are_merged_under_own_keys() -> None:
    config = load_config(CONFIGS / "experiments/ssv2_xvit_b16_16f.yaml")
    assert config.model.name == "xvit_b16_16x224"  # from model/
    assert config.data.sampling == "segment"  # from data/ssv2.yaml
    assert config.train.precision == "bf16"  # from deepspeed/
    assert config.train.global_batch_size == 128
    assert config.train.gradient_accumulation_steps == 2  # 128 / (8 clips x 8 workers)


def test_overrides_are_typed_by_the_schema() -> None:
    config = load_config(
        CONFIGS / "experiments/demo.yaml",
        ["train.optimizer.lr=0.1", "data.horizontal_flip=true", "train.zero_stage=3", "train.run_name=r1"],
    )
    assert config.train.optimizer.lr == pytest.approx(0.1)
    assert config.data.horizontal_flip is True
    assert config.train.zero_stage == 3
    assert config.train.run_name == "r1"


def test_override_creates_missing_sections() -> None:
    raw = apply_overrides({}, ["train.optimizer.lr=0.2"])
    assert raw == {"train": {"optimizer": {"lr": 0.2}}}


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("train.nope=1", "train.nope"),
        ("train.optimizer.lr=abc", "train.optimizer.lr"),
        ("train.precision=fp8", "train.precision"),
        ("train.global_batch_size=7", "train.global_batch_size"),
    ],
)
def test_bad_override_names_override_and_field(override: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(CONFIGS / "experiments/demo.yaml", [override])
    message = str(info.value)
    assert message.startswith(f"--set {override}: {field}: ")
    assert "\n" not in message


def test_unknown_key_in_file_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  name: xvit_tiny\n  size: huge\n")
    with pytest.raises(
        ConfigError, match=rf"^{path}: model.size: no such setting; nearby: (\S+, )*model.name[,( ]"
    ):
        load_config(path)


def test_invalid_yaml_and_non_mapping_are_clear(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(scalar)


def test_include_cycle_is_reported(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("include: [b.yaml]\n")
    (tmp_path / "b.yaml").write_text("include: [a.yaml]\n")
    with pytest.raises(ConfigError, match="include cycle"):
        load_config(tmp_path / "a.yaml")


def test_dump_then_load_gives_the_same_config(tmp_path: Path) -> None:
    config = load_config(CONFIGS / "experiments/k400_xvit_b16_8f.yaml", ["train.optimizer.lr=0.02"])
    path = tmp_path / "resolved.yaml"
    path.write_text(dump_config(config))
    assert load_config(path) == config


def test_yaml_tags_are_not_executed(tmp_path: Path) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(path)


def alias_bomb(levels: int = 9) -> str:
    """A YAML flow mapping of `levels` nested anchors, each a list of nine aliases of the one before:
    9 ** levels strings from ~60 bytes a level."""
    lists = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    lists += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "{" + ", ".join(lists) + "}"


def test_yaml_aliases_that_expand_past_a_limit_are_refused_in_one_line(tmp_path: Path, vidtx) -> None:
    """A 600-byte alias bomb in `train.deepspeed` took 2.6 GB and timed out `vidtx config show`."""
    override = f"train.deepspeed={alias_bomb()}"
    with pytest.raises(ConfigError, match=rf"^--set {re.escape(override)}: YAML aliases repeat more than"):
        load_config(None, [override])
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(f"train:\n  deepspeed: {alias_bomb()}\n")
    started = time.monotonic()
    result = vidtx("config", "show", str(bomb))
    assert time.monotonic() - started < 30
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {bomb}: YAML aliases repeat more than 10000 values (an alias bomb?); "
        "write the values out or use include:"
    ]
    cycle = tmp_path / "cycle.yaml"
    cycle.write_text("train:\n  deepspeed: &a {nested: *a}\n")
    with pytest.raises(ConfigError, match=f"^{cycle}: a YAML alias refers to a value that contains it"):
        load_config(cycle)
    # Aliases within the limit, as people use them (merge keys included), are read as before.
    shared = tmp_path / "shared.yaml"
    shared.write_text(
        "train:\n  optimizer: &opt {name: adamw, lr: 0.01}\n"
        f"  deepspeed: {{levels: {alias_bomb(3)}, merged: {{<<: *opt, lr: 0.02}}}}\n"
    )
    config = load_config(shared)
    assert config.train.optimizer.lr == 0.01
    assert config.train.deepspeed["levels"]["a2"] == [[["lol"] * 9] * 9] * 9
    assert config.train.deepspeed["merged"] == {"name": "adamw", "lr": 0.02}


def test_gradient_accumulation_follows_global_batch() -> None:
    assert TrainConfig(num_workers=2, micro_batch_size=4).gradient_accumulation_steps == 1
    assert (
        TrainConfig(num_workers=2, micro_batch_size=4, global_batch_size=32).gradient_accumulation_steps == 4
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"include: 5\n", "include: expected a file name or a list of file names, got 5"),
        (b"include: [null]\n", "include: expected a file name or a list of file names, got [None]"),
        (b"name: caf\xe9\n", "not a UTF-8 text file"),  # Latin-1
    ],
    ids=["include_number", "include_null", "latin1"],
)
def test_unusable_config_files_are_one_line_errors_naming_the_file(
    tmp_path: Path, text: bytes, problem: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: {problem}")
    assert "\n" not in str(info.value)


def test_a_model_that_cannot_be_built_is_a_config_error_naming_the_fields() -> None:
    """Built on the meta device when the config is checked: not after 36 s inside the Ray workers."""
    config = load_config(CONFIGS / "experiments/demo.yaml", ["data.crop_size=60"])  # patch size 8
    with pytest.raises(ConfigError, match=r"data\.crop_size=60.*model\.name=xvit_tiny.*not a multiple"):
        check_model_config(config)
    check_model_config(load_config(CONFIGS / "experiments/demo.yaml", ["data.crop_size=48"]))


def schema_descriptions(node: object, path: str = "") -> Iterator[tuple[str, str]]:
    """(where, text) of every `description` in a JSON schema: fields' and models' (docstrings)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                yield path or "/", value
            else:
                yield from schema_descriptions(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from schema_descriptions(value, f"{path}/{index}")


def test_schema_descriptions_have_no_angle_brackets() -> None:
    """The Prefect run form shows these descriptions as HTML: `<workdir>` would vanish as a tag."""
    descriptions = dict(schema_descriptions(PipelineConfig.model_json_schema()))
    assert "/$defs/TrackingConfig/properties/tracking_uri" in descriptions  # the walk reaches fields
    assert not {where: text for where, text in descriptions.items() if "<" in text or ">" in text}


def test_the_readme_config_in_ten_lines_is_a_valid_config(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    block = readme.split("## The config in ten lines", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    assert len(block.splitlines()) <= 10
    shutil.copytree(root / "configs", tmp_path / "configs")
    (tmp_path / "configs/experiments/readme.yaml").write_text(block)
    config = load_config(tmp_path / "configs/experiments/readme.yaml")
    assert config.model.name == "xvit_b16_8x224"  # from the included fragment
    assert config.train.storage_path == "s3://my-bucket/ray"
