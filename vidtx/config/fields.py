"""The schema as a flat table of settings, one row per dotted key that `--set` takes.

Every place that lists settings reads this table, so none repeats the schema: each command's
`--help`, `vidtx config fields`, the docs' configuration reference and the suggestion that follows a
mistyped key. `COMMAND_SECTIONS` says which sections each command reads.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from vidtx.config.base import ConfigError
from vidtx.config.schema import PipelineConfig
from vidtx.locations import Location

_JSON = TypeAdapter(Any)
ROOT = "pipeline"  # the section of the top-level scalars (`name`, `workdir`)


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The section class a field holds (`SynthConfig | None` -> SynthConfig), None for a value (a
    mapping or list of models, `sweep.space`, is one value: its keys are the user's)."""
    if typing.get_origin(annotation) in (dict, list, tuple):
        return None
    for arg in typing.get_args(annotation) or (annotation,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


SECTIONS: tuple[str, ...] = (
    ROOT,
    *(name for name, field in PipelineConfig.model_fields.items() if section_model(field.annotation)),
)
_RUN = (ROOT, "storage", "tracking")
COMMAND_SECTIONS: dict[str, tuple[str, ...]] = {
    "config show": SECTIONS,
    "synth": ("synth",),
    "shard": ("shard", "storage"),
    "train": (*_RUN, "data", "model", "train"),
    "evaluate": (*_RUN, "data", "model", "train", "eval"),
    "register": (*_RUN, "data", "model", "train", "eval", "registry", "export"),
    "export": (*_RUN, "data", "model", "train", "eval", "export"),
    "predict": ("predict", "eval", "storage"),
    "pipeline": tuple(section for section in SECTIONS if section not in ("predict", "sweep", "pretrain")),
    "pretrain": (*_RUN, "data", "model", "train", "pretrain"),
    "sweep": (*_RUN, "data", "model", "train", "eval", "registry", "export", "pretrain", "sweep"),
    "plan": ("data", "model", "train"),
}


@dataclass(frozen=True)
class Setting:
    key: str  # dotted, as `--set` takes it: shard.reencode.short_side
    type: str  # int, float | None, location, section | None (a whole optional section), ...
    choices: tuple[str, ...]  # the values a Literal allows, else ()
    default: str  # as YAML writes it, so it can be given back to --set
    description: str

    @property
    def kind(self) -> str:
        """The choices the setting allows (`folder|kinetics|ssv2|csv`), else its type."""
        if not self.choices:
            return self.type
        return "|".join(self.choices) + (" | None" if self.type.endswith("| None") else "")

    @property
    def section(self) -> str:
        if "." in self.key or self.key in SECTIONS:  # `synth`: the optional section itself
            return self.key.partition(".")[0]
        return ROOT


def settings(sections: Iterable[str] | None = None) -> list[Setting]:
    """Every setting of `sections` (default: all) in schema order; ConfigError names an unknown one."""
    wanted = list(SECTIONS if sections is None else sections)
    if unknown := [name for name in wanted if name not in SECTIONS]:
        raise ConfigError(f"no config section {', '.join(unknown)}; the sections: {', '.join(SECTIONS)}")
    return [setting for setting in _walk(PipelineConfig, "") if setting.section in wanted]


def schema_field(key: str) -> FieldInfo:
    """The schema's field of a dotted key (`train.optimizer.lr`); ConfigError names an unknown one."""
    model: type[BaseModel] | None = PipelineConfig
    field = None
    for part in key.split("."):
        if model is None or part not in model.model_fields:
            raise ConfigError(f"{key}: no such setting (`vidtx config fields` lists them)")
        field = model.model_fields[part]
        model = section_model(field.annotation)
    assert field is not None
    return field


def section_summary(section: str) -> str:
    """The first line of a section's docstring, without its "`name`: " prefix."""
    return model_summary(
        PipelineConfig if section == ROOT else section_model(PipelineConfig.model_fields[section].annotation)
    )


def model_summary(model: type[BaseModel] | None) -> str:
    first_line = (model.__doc__ or "").strip().splitlines()[0] if model else ""
    summary = first_line.split(": ", 1)[1] if first_line.startswith("`") else first_line
    return summary[:1].upper() + summary[1:]


def nearby(key: str) -> list[str]:
    """Keys like a mistyped `key`: the closest by spelling, else those beside it in its section."""
    keys = [setting.key for setting in settings() if ("." in setting.key) == ("." in key)]
    keys += [] if "." in key else list(SECTIONS[1:])
    if close := difflib.get_close_matches(key, keys, n=3, cutoff=0.6):
        return close
    parent = key.rpartition(".")[0]
    return [other for other in keys if parent and other.rpartition(".")[0] == parent]


def _walk(model: type[BaseModel], prefix: str) -> Iterator[Setting]:
    for name, field in model.model_fields.items():
        key = prefix + name
        if (section := section_model(field.annotation)) is None:
            yield Setting(key, *_type_of(field.annotation), _yaml(field), described(field, flow_yaml))
            continue
        if type(None) in typing.get_args(field.annotation):  # an optional section: null turns it off
            summary = field.description or model_summary(section)
            yield Setting(key, "section | None", (), _yaml(field), summary)
        yield from _walk(section, f"{key}.")


def _type_of(annotation: Any) -> tuple[str, tuple[str, ...]]:
    """(type name, choices) of an annotation, as a user writes the value."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation == Location:
        return "location", ()
    if origin is typing.Annotated:
        return _type_of(args[0])
    if origin is Literal:
        return type(args[0]).__name__, tuple(str(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        parts = [_type_of(arg) for arg in args if arg is not type(None)]
        name = " | ".join(part[0] for part in parts) + (" | None" if type(None) in args else "")
        return name, tuple(choice for part in parts for choice in part[1])
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{', '.join(_type_of(arg)[0] for arg in args)}]", ()
    if annotation is Path:
        return "path", ()
    return getattr(annotation, "__name__", str(annotation).removeprefix("typing.")), ()


def described(field: FieldInfo, write: Callable[[Any], str]) -> str:
    """A field's description and, where the schema gives one, its example as `write` writes values:
    YAML for the config file and `--set`, JSON for a run form's editor."""
    if not field.examples:
        return field.description or ""
    return f"{field.description} E.g. {write(field.examples[0])}."


def _yaml(field: FieldInfo) -> str:
    return flow_yaml(field.get_default(call_default_factory=True))


def flow_yaml(value: Any) -> str:
    """`value` on one line as YAML's flow style writes it (`{choice: [4, 8]}`)."""
    return (
        yaml.safe_dump(
            _JSON.dump_python(value, mode="json"), default_flow_style=True, sort_keys=False, width=1_000
        )
        .strip()
        .removesuffix("...")
        .strip()
    )
