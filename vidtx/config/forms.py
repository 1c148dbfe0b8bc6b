"""The run forms of the Prefect flows: what a person fills in to start one from the UI.

A form holds a config file, the few settings of it that a person changes most, and free
`section.field=value` overrides. The settings are the schema's own fields (type, limits and
description; empty keeps the file's value), and every value goes through the parser of `vidtx --set`:
`pipeline()` is the CLI's `load_config(file, overrides)`, with the same one-line errors, before
anything starts. The rest of the schema is reached through the file and the overrides, so a form is a
handful of fields, not the 91 to 139 of a form that showed every section a flow reads.

Its JSON schema is shaped for Prefect's run form (its new UI, the one its root opens; the old one draws
the same schema): every property is titled by its key ("Max Steps", "LR"), never a class name; a
nullable setting with a None default is its value's own shape without a default (the form leaves it
empty and omits it), not a row of type tabs with a "Property is type None" note; descriptions are
plain text (code marks become quotes). The config file is the one required field: a run cannot start
without it, and every deployment gives it.
"""

from __future__ import annotations

import functools
import json
import re
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ConfigDict, Field, GetJsonSchemaHandler, create_model, field_validator
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import to_jsonable_python

from vidtx.config.base import StrictModel
from vidtx.config.fields import described, schema_field
from vidtx.config.loading import load_config
from vidtx.config.schema import PipelineConfig
from vidtx.locations import Location

_CODE = re.compile(r"`([^`]*)`")
_NONE = re.compile(r"\bNone\b")
# what a schema field's None means: "(None: as many as fit)" or a closing "None: the config's name."
_NONE_RULE = re.compile(r"\s*\(None: (?P<parens>[^)]*)\)|\s*None: (?P<sentence>[^.]*)\.$")
_JSON_EXAMPLE = functools.partial(json.dumps, separators=(", ", ": "))
# words of a key that a title writes otherwise than capitalized
_WORDS = {"cpus": "CPUs", "gpu": "GPU", "lr": "LR", "uri": "URI", "url": "URL"}
CONFIG_DESCRIPTION = (
    "The pipeline config (YAML, as `vidtx` commands take it; in `configs/`), relative to the folder "
    "the flow runs in. Every setting not given below comes from it."
)
OVERRIDES_DESCRIPTION = (
    "More settings, one `section.field=value` each, as `vidtx --set` takes them (e.g. "
    "`data.num_frames=16`, `train.optimizer.name=sgd`); `vidtx config fields` lists them all. They "
    "apply after the fields above."
)


class Form(StrictModel):
    """A run form's fields, with a JSON schema shaped for Prefect's run form (see the module
    docstring); `REQUIRED` are the fields a run cannot start without."""

    REQUIRED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: Any, handler: GetJsonSchemaHandler, /
    ) -> JsonSchemaValue:
        json_schema = handler(core_schema)
        _shape(handler.resolve_ref_schema(json_schema), cls.REQUIRED)
        return json_schema


class RunForm(Form):
    """A flow's run form: a config file, settings of it, overrides (see the module docstring)."""

    model_config = ConfigDict(from_attributes=True)
    REQUIRED = ("config",)
    SETTINGS: ClassVar[dict[str, str]] = {}  # field name -> the dotted key it sets
    if TYPE_CHECKING:  # made by `run_form`, in the form's order: config, the settings, overrides
        config: Path
        overrides: list[str]

    def given(self) -> list[str]:
        """The form as `--set` overrides: each setting given, then the free overrides."""
        values = {key: getattr(self, name) for name, key in self.SETTINGS.items()}
        given = {key: to_jsonable_python(value) for key, value in values.items() if value is not None}
        return [f"{key}={json.dumps(value)}" for key, value in given.items()] + self.overrides

    def pipeline(self, *more: str) -> PipelineConfig:
        """The config the form describes, with `more` overrides after its own; ConfigError names the
        setting that cannot be used, in one line."""
        return load_config(self.config, [*self.given(), *more])


def run_form(
    name: str, summary: str, /, *, empty: Mapping[str, str] | None = None, **settings: str
) -> type[RunForm]:
    """The form `name` (described by `summary`): the config file, `settings` (field name -> dotted key
    of the schema, in the form's order), the overrides. `empty` says, per field, what the flow uses
    where the field and the config file both leave a setting empty, when that is not the schema's
    own None."""
    fields: dict[str, Any] = {"config": (Path, Field(description=CONFIG_DESCRIPTION))}
    validators: dict[str, Any] = {}
    for field_name, key in settings.items():
        field = schema_field(key)
        value = str if field.annotation == Location else field.annotation  # a path or a bucket URL
        annotation = value if field.default is None else value | None
        fields[field_name] = (
            annotation,
            Field(None, description=_when_empty(field, key, (empty or {}).get(field_name)), **_limits(field)),
        )
        if typing.get_origin(field.annotation) is dict:  # Prefect's run form edits it as JSON
            validators[f"_{field_name}_is_json"] = field_validator(field_name, mode="before")(_json_of(field))
    fields["overrides"] = (list[str], Field(default_factory=list, description=OVERRIDES_DESCRIPTION))
    form = create_model(
        name, __base__=RunForm, __doc__=summary, __module__=__name__, __validators__=validators, **fields
    )
    form.SETTINGS = dict(settings)
    return form


def _when_empty(field: FieldInfo, key: str, flows_default: str | None) -> str:
    """A setting's description on the form, in one rule for an empty field: it keeps the config file's
    value, or where the file has none, the flow's default or what the schema says its None means."""
    description = described(field, _JSON_EXAMPLE)
    if rule := _NONE_RULE.search(description):
        description = (description[: rule.start()] + description[rule.end() :]).strip()
        flows_default = flows_default or rule["parens"] or rule["sentence"]
    when_empty = f"Empty: the config file's `{key}`"
    return (
        f"{description} {when_empty}, or where the file has none, {flows_default}."
        if flows_default
        else f"{description} {when_empty}."
    )


def _json_of(field: FieldInfo) -> Callable[[Any], Any]:
    """The before-validator of a mapping setting: a text value is read as JSON, and text that is not
    JSON (YAML's flow style, as a config file writes it) is one line saying what the field takes."""
    example = _JSON_EXAMPLE(field.examples[0]) if field.examples else "{}"

    def json_of(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(
                f"takes JSON, e.g. {example}, not {value!r} (YAML's syntax is for the config file and its overrides)"
            ) from None

    return json_of


def _limits(field: Any) -> dict[str, Any]:
    """The numeric limits of a schema field (ge, gt, le, lt), for the form's own validation."""
    names = ("ge", "gt", "le", "lt")
    return {name: getattr(item, name) for item in field.metadata for name in names if hasattr(item, name)}


def field_title(key: str) -> str:
    """The form's label of a key: `max_steps` -> "Max Steps"."""
    return " ".join(_WORDS.get(word, word.capitalize()) for word in key.split("_"))


def plain(text: str) -> str:
    """`text` as the form shows it, plain: a `code` mark becomes "code"."""
    return _CODE.sub(r'"\1"', text).replace("`", "'")


def _shape(schema: JsonSchemaValue, required: tuple[str, ...]) -> None:
    """Shape a form's JSON schema (changed in place) for Prefect's run form."""
    schema["description"] = plain(schema.get("description", ""))
    for key, prop in schema.get("properties", {}).items():
        prop["title"] = "Config File" if key == "config" else field_title(key)
        options = prop.get("anyOf", [])
        values = [option for option in options if option.get("type") != "null"]
        if len(values) < len(options) == 2 and prop.get("default", ...) is None and "type" in values[0]:
            del prop["anyOf"], prop["default"]  # one typed value or None: the value alone
            prop.update(values[0])
        if "description" in prop:
            prop["description"] = plain(_NONE.sub("empty", prop["description"]))
    schema["required"] = list(required)
