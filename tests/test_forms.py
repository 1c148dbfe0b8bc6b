"""The flows' run forms (`vidtx.config.forms`, `flows/forms.py`): what Prefect's UI draws from each flow's
parameter schema, and what a form becomes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect.exceptions import ParameterTypeError
from prefect.flows import load_flow_from_entrypoint
from pydantic import ValidationError

from flows.forms import DEMO_CONFIG, PipelineForm, PredictForm, SweepForm, TrainForm
from vidtx.config import ConfigError, load_config
from vidtx.config.fields import schema_field
from vidtx.config.forms import run_form

ROOT = Path(__file__).resolve().parent.parent
FLOWS = {
    "shard-dataset": "flows/shard.py:shard_dataset",
    "train-model": "flows/train.py:train_model",
    "evaluate-model": "flows/evaluate.py:evaluate_model",
    "register-model": "flows/evaluate.py:register_model",
    "video-pipeline": "flows/pipeline.py:video_pipeline",
    "sweep-model": "flows/sweep.py:sweep_model",
    "pretrain-model": "flows/pretrain.py:pretrain_model",
    "batch-predict": "flows/predict.py:batch_predict",
}
MOST_FIELDS = 25  # a form that fits on two screens at 1400x900 (tests/test_ui.py measures the height)


def leaves(schema: dict[str, Any], node: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(title, property) of every field a person fills in: objects with properties opened, a `$ref`
    followed, a dict (a JSON editor) or a list one field."""
    found = []
    for key, prop in node.get("properties", {}).items():
        target = prop
        if "$ref" in prop:
            target = schema["definitions"][prop["$ref"].rpartition("/")[2]]
        if target.get("properties"):
            found += leaves(schema, target)
        else:
            found.append((prop.get("title", key), prop))
    return found


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict[str, Any]]:
    return {
        name: load_flow_from_entrypoint(str(ROOT / path)).parameters.model_dump()
        for name, path in FLOWS.items()
    }


def test_each_flows_form_is_a_handful_of_fields_each_described_in_full(schemas: dict[str, dict]) -> None:
    counts = {name: len(leaves(schema, schema)) for name, schema in schemas.items()}
    assert max(counts.values()) <= MOST_FIELDS, counts  # were 91 (train-model) to 139 (video-pipeline)
    for name, schema in schemas.items():
        for title, prop in leaves(schema, schema):
            assert "anyOf" not in prop, (name, title)  # no "Property is type None" tabs
            description = prop.get("description", "")
            assert description.rstrip().endswith((".", ")", "'")), (name, title, description)  # not cut
            assert "`" not in description, (name, title)
            assert description.lower().count("empty") <= 1, (name, title, description)  # one rule, said once
            assert title != "Run Name", name  # Prefect's own field above the parameters names the flow run


def test_a_json_editors_example_is_json_and_text_in_yaml_is_one_line(schemas: dict[str, dict]) -> None:
    space = SweepForm.model_json_schema()["properties"]["space"]
    example = json.loads(space["description"].partition("E.g. ")[2].partition("}}. ")[0] + "}}")
    assert SweepForm(config=DEMO_CONFIG, space=example).pipeline().sweep.space[
        "model.options.shift_div"
    ].choice == [4, 8]
    flow = load_flow_from_entrypoint(str(ROOT / FLOWS["sweep-model"]))
    yaml_text = "{train.optimizer.lr: {loguniform: [1.0e-5, 1.0e-3]}}"
    with pytest.raises(ParameterTypeError) as raised:
        flow.validate_parameters({"settings": {"config": DEMO_CONFIG, "space": yaml_text}})
    (error,) = [line for line in str(raised.value).splitlines() if "takes JSON" in line]
    assert json.dumps(example, separators=(", ", ": ")) in error
    assert repr(yaml_text) in error
    as_text = json.dumps({"train.optimizer.lr": {"choice": [0.1, 0.2]}})  # JSON given as text reads as JSON
    assert SweepForm(config=DEMO_CONFIG, space=as_text).space["train.optimizer.lr"].choice == [0.1, 0.2]


@pytest.mark.parametrize("flow", [name for name in FLOWS if name != "batch-predict"])  # has no file
def test_a_form_opens_with_the_config_file_then_its_settings_and_the_overrides(
    flow: str, schemas: dict[str, dict]
) -> None:
    schema = schemas[flow]
    (parameter,) = schema["properties"]
    form = schema["definitions"][schema["properties"][parameter]["$ref"].rpartition("/")[2]]
    titles = [prop["title"] for prop in form["properties"].values()]
    assert (titles[0], titles[-1]) == ("Config File", "Overrides")
    assert form["required"] == ["config"]  # the one field a run cannot start without


def test_train_models_form_shows_what_a_person_changes_most() -> None:
    form = TrainForm.model_json_schema()
    assert [prop["title"] for prop in form["properties"].values()] == [
        "Config File", "Max Steps", "LR", "Num Workers", "Training Run", "Overrides"
    ]  # fmt: skip
    assert form["properties"]["max_steps"]["minimum"] == 1  # the schema's own limits
    assert form["properties"]["lr"]["description"].startswith(schema_field("train.optimizer.lr").description)
    sweep = SweepForm.model_json_schema()["properties"]
    assert {"num_trials", "max_concurrent", "space"} <= set(sweep)


def test_a_form_is_the_config_file_with_the_settings_then_the_overrides_applied() -> None:
    form = PipelineForm(config=DEMO_CONFIG, max_steps=5, lr=0.01, overrides=["train.max_steps=7", "name=x"])
    assert form.pipeline() == load_config(
        ROOT / DEMO_CONFIG, ["train.max_steps=5", "train.optimizer.lr=0.01", "train.max_steps=7", "name=x"]
    )
    assert PipelineForm(config=DEMO_CONFIG).pipeline() == load_config(ROOT / DEMO_CONFIG)  # empty: the file's
    space = {"train.optimizer.lr": {"choice": [0.1, 0.2]}}
    assert SweepForm(config=DEMO_CONFIG, space=space).pipeline().sweep.space["train.optimizer.lr"].choice == [
        0.1, 0.2
    ]  # fmt: skip


def test_a_bad_override_is_the_same_one_line_as_the_cli_s() -> None:
    with pytest.raises(ConfigError) as raised:
        TrainForm(config=DEMO_CONFIG, overrides=["train.max_stepz=3"]).pipeline()
    cli = subprocess.run(
        [sys.executable, "-m", "vidtx", "config", "show", DEMO_CONFIG, "--set", "train.max_stepz=3"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert cli.returncode == 2
    assert cli.stderr.strip() == f"error: {raised.value}"
    with pytest.raises(Exception, match="greater than or equal to 1"):
        TrainForm(config=DEMO_CONFIG, max_steps=0)  # a setting's limits: Prefect's form says so too


def test_batch_predicts_form_needs_the_videos_and_the_table() -> None:
    assert PredictForm.model_json_schema()["required"] == ["videos", "output"]
    with pytest.raises(ValidationError, match="output"):
        PredictForm(videos=["data/synthetic/test"])


def test_a_setting_that_is_no_schema_key_cannot_make_a_form() -> None:
    with pytest.raises(ConfigError, match=r"train\.max_stepz: no such setting"):
        run_form("Broken", "A form.", steps="train.max_stepz")


def test_every_deployment_validates_against_its_flows_form() -> None:
    for deployment in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]:
        flow = load_flow_from_entrypoint(str(ROOT / deployment["entrypoint"]))
        flow.validate_parameters(deployment.get("parameters") or {})
