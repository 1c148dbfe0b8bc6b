"""A config of the sections one command reads: the parameters of a flow that reads only those.

The Prefect UI draws a flow's run form from its parameters' JSON schema. A flow that took the whole
`PipelineConfig` showed every section, those it never reads included (train-model's form had Synth,
Shard and Predict, and described "the whole pipeline"). `sections_config(command)` builds a model of
exactly the sections `COMMAND_SECTIONS[command]` names, with PipelineConfig's own fields (types,
defaults, descriptions), so nothing is declared twice; `.pipeline()` makes it a whole config again
for the stages, every other section at its default.

Its JSON schema is shaped for that form (Prefect's new UI, the one its root opens; the old one draws
the same schema as well) and for nothing else: validation is the models' own. What the form does
with each shape, and so what `_shape` gives it:
- a property's label is its `title` (a `$ref`'s definition's, unless the property has its own), with
  " (Optional)" unless the object lists it in `required`: every property gets a title of its key
  ("Data", "Cache Dir"), never a class name ("DataConfig"). None is marked required: Prefect's server
  enforces `required` on every run it creates, and the deployments' parameters are partial configs.
- `anyOf` is a row of type tabs, its `null` option a "Property is type None" note: a nullable value
  with a None default (`str | None = None`) becomes its value's own shape without a default. Prefect's
  server takes null for a property that is not required, has a `type` and no `default` (its
  `_fix_null_typing`); the form leaves it empty and omits it (the model's None), which its
  description calls "empty" (text typed and erased again is "": the field's "Omit value" undoes it).
  A nullable section (`synth`) keeps its tabs: without a default its fields would fill themselves in.
- descriptions are plain text (backticks would show): code marks become quotes; a section's is its
  summary line, not its whole docstring.
- an object without properties (a dict) is a JSON editor holding its `default`: a dict made by a
  default factory gets that default in the schema (pydantic leaves it out), `{}` included.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, TypeAdapter, create_model
from pydantic.json_schema import JsonSchemaValue

from vidtx.config.base import StrictModel
from vidtx.config.fields import COMMAND_SECTIONS, ROOT, SECTIONS, model_summary, section_model
from vidtx.config.schema import PipelineConfig

_JSON = TypeAdapter(Any)
_CODE = re.compile(r"`([^`]*)`")
_NONE = re.compile(r"\bNone\b")  # a nullable value's None: its field left empty
# words of a key that a title writes otherwise than capitalized
_WORDS = {
    "cpus": "CPUs", "crf": "CRF", "deepspeed": "DeepSpeed", "fps": "FPS", "gb": "GB", "gpu": "GPU",
    "jpeg": "JPEG", "lr": "LR", "mb": "MB", "s": "(s)", "tflops": "TFLOPS", "top1": "Top-1",
    "ui": "UI", "uri": "URI", "url": "URL",
}  # fmt: skip


class SectionsConfig(StrictModel):
    """Some sections of a PipelineConfig. Validating a PipelineConfig (or any object with these
    attributes) takes just these sections, so a flow that reads them accepts the whole config too."""

    model_config = ConfigDict(from_attributes=True)

    def pipeline(self) -> PipelineConfig:
        """The whole config: these sections, every other at its default."""
        return PipelineConfig(**dict(self))

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: Any, handler: GetJsonSchemaHandler, /
    ) -> JsonSchemaValue:
        json_schema = handler(core_schema)
        _shape(cls, handler.resolve_ref_schema(json_schema), handler.resolve_ref_schema, set())
        return json_schema


def sections_config(command: str, name: str, summary: str) -> type[SectionsConfig]:
    """The model `name` of the sections `command` reads, described as `summary` (the form's text)."""
    sections = COMMAND_SECTIONS[command]
    fields = {
        field_name: (field.annotation, field)
        for field_name, field in PipelineConfig.model_fields.items()
        if (field_name if field_name in SECTIONS else ROOT) in sections
    }
    doc = f"{summary}\n\nWhat it reads: {', '.join(fields)}; every other section keeps its default."
    return create_model(name, __base__=SectionsConfig, __doc__=doc, __module__=__name__, **fields)


def field_title(key: str) -> str:
    """The form's label of a key: `cache_gb` -> "Cache GB"."""
    return " ".join(_WORDS.get(word, word.capitalize()) for word in key.split("_"))


def plain(text: str) -> str:
    """`text` as the form shows it, plain: a `code` mark becomes "code"."""
    return _CODE.sub(r'"\1"', text).replace("`", "'")


def _shape(
    model: type[BaseModel],
    schema: JsonSchemaValue,
    resolve: Callable[[JsonSchemaValue], JsonSchemaValue],
    seen: set[int],
) -> None:
    """Shape `schema`, the JSON schema of `model` (a definition, changed in place), and the
    definitions of its sections for Prefect's run form (see the module's docstring)."""
    if id(schema) in seen:  # a definition two fields share is shaped once
        return
    seen.add(id(schema))
    if "description" in schema:
        schema["description"] = plain(schema["description"])
    properties = schema.get("properties", {})
    for key, field in model.model_fields.items():
        if (prop := properties.get(key)) is None:
            continue
        prop["title"] = field_title(key)
        options = prop.get("anyOf", [])
        values = [option for option in options if option.get("type") != "null"]
        if (section := section_model(field.annotation)) is not None:
            target = next((option for option in options if "$ref" in option), prop)
            _shape(section, resolve(target), resolve, seen)
            target["title"] = prop["title"]  # a nullable section's tab too, not the class name
            prop["description"] = target["description"] = plain(model_summary(section))
            if field.description:
                prop["description"] = plain(field.description)
            continue
        if len(values) < len(options) == 2 and "default" in prop and prop["default"] is None:
            (value,) = values
            # one typed value or None: the value alone (not a choice: None would not be among its values)
            if "type" in value and "$ref" not in value and "enum" not in value:
                del prop["anyOf"], prop["default"]
                prop.update(value)
                if "description" in prop:
                    prop["description"] = _NONE.sub("empty", prop["description"])
        elif "default" not in prop and field.default_factory is not None:
            prop["default"] = _JSON.dump_python(field.get_default(call_default_factory=True), mode="json")
        if "description" in prop:
            prop["description"] = plain(prop["description"])
