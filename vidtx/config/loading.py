"""Reading configs: YAML files with `include:`, dotted `--set` overrides, one-line errors.

A file may `include:` other files (paths relative to itself), which are deep-merged first, so
`configs/model/*.yaml` and `configs/deepspeed/*.yaml` are fragments that experiments compose. Every
error names the file (or the `--set` override) and the dotted field.

Configs come from users and from Prefect forms, so YAML is read with the safe loader only, and aliases
may repeat at most `ALIAS_EXPANSION_LIMIT` values: PyYAML shares an aliased value, but every copy,
merge and validation expands it, and nine nested aliases of nine lists (600 bytes) are 400 million
values ("billion laughs").
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from vidtx.config.base import ConfigError
from vidtx.config.fields import nearby
from vidtx.config.schema import PipelineConfig

ALIAS_EXPANSION_LIMIT = 10_000  # values that aliases may add; a whole config writes out a few hundred


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge `update` into a copy of `base` (mappings merge, everything else replaces)."""
    merged = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _safe_load(text: str, origin: str) -> Any:
    """`yaml.safe_load(text)`, refusing (ConfigError naming `origin`) aliases that would expand the
    document by more than ALIAS_EXPANSION_LIMIT values, or that contain themselves."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        sizes: dict[int, int] = {}
        if _expanded_size(node, sizes, set(), origin) - len(sizes) > ALIAS_EXPANSION_LIMIT:
            raise ConfigError(
                f"{origin}: YAML aliases repeat more than {ALIAS_EXPANSION_LIMIT} values "
                "(an alias bomb?); write the values out or use include:"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int], origin: str) -> int:
    """The values under `node` with every alias expanded (a node reached again counts again); `sizes`
    keeps each distinct node's, so shared nodes are counted without being walked again."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_nodes:
        raise ConfigError(f"{origin}: a YAML alias refers to a value that contains it (a cycle)")
    open_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    else:
        children = node.value if isinstance(node, yaml.SequenceNode) else []
    sizes[id(node)] = 1 + sum(_expanded_size(child, sizes, open_nodes, origin) for child in children)
    open_nodes.discard(id(node))
    return sizes[id(node)]


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a YAML mapping, resolving its `include:` list first (paths relative to the file)."""
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: include cycle through {' -> '.join(map(str, seen))}")
    try:
        raw = _safe_load(path.read_text(encoding="utf-8"), str(path)) or {}
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config ({err.strerror})") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start})") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML ({err})".replace("\n", " ")) from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(raw).__name__}")
    merged: dict[str, Any] = {}
    for include in _includes(path, raw.pop("include", [])):
        merged = deep_merge(merged, _read_yaml(path.parent / include, (*seen, path)))
    return deep_merge(merged, raw)


def _includes(path: Path, value: Any) -> list[str]:
    """The file names of an `include:` entry: one name, a list of names, or nothing (empty)."""
    names = [] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(name, str) and name for name in names):
        raise ConfigError(f"{path}: include: expected a file name or a list of file names, got {value!r}")
    return names


def _describe(detail: Mapping[str, Any], source: str, overrides: list[str]) -> str:
    """One problem as `origin: dotted.field: message`; the origin is the last override touching it."""
    loc = [str(part) for part in detail["loc"]]
    origin = source
    for override in reversed(overrides):
        keys = override.partition("=")[0].strip().split(".")
        shared = min(len(keys), len(loc))
        if keys[:shared] == loc[:shared]:
            origin = f"--set {override}"
            break
    message = detail["msg"].removeprefix("Value error, ")
    if detail["type"] == "extra_forbidden":  # a mistyped key: name the ones it may have meant
        keys, section = nearby(".".join(loc)), f" {loc[0]}" if len(loc) > 1 else ""
        message = "no such setting" + (f"; nearby: {', '.join(keys)}" if keys else "")
        message += f" (every setting: vidtx config fields{section})"
    return f"{origin}: {'.'.join(loc) or '<root>'}: {message}"


def parse_override(override: str) -> tuple[list[str], Any]:
    """Split `a.b.c=value` into (["a", "b", "c"], value); the value is read as YAML (1 -> int)."""
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {override}: expected KEY=VALUE, e.g. train.optimizer.lr=0.05")
    try:
        value = _safe_load(text, f"--set {override}") if text.strip() else None
    except yaml.YAMLError:
        value = text
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply dotted `KEY=VALUE` overrides to a raw config mapping (validated afterwards)."""
    result = copy.deepcopy(data)
    for override in overrides:
        keys, value = parse_override(override)
        node = result
        for depth, key in enumerate(keys[:-1]):
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            elif not isinstance(child, dict):
                dotted = ".".join(keys[: depth + 1])
                raise ConfigError(f"--set {override}: {dotted} is a value, not a section")
            node = child
        node[keys[-1]] = value
    return result


def validate_config(
    data: Mapping[str, Any], source: str = "<config>", overrides: Iterable[str] = ()
) -> PipelineConfig:
    """Validate a raw mapping; errors name the source (file or override) and the dotted field."""
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as err:
        overrides = list(overrides)
        raise ConfigError("; ".join(_describe(d, source, overrides) for d in err.errors())) from None


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> PipelineConfig:
    """Load a YAML file (or the built-in defaults when `path` is None) and apply `--set` overrides."""
    overrides = list(overrides)
    raw = _read_yaml(Path(path)) if path is not None else {}
    raw = apply_overrides(raw, overrides)
    return validate_config(raw, str(path) if path is not None else "<defaults>", overrides)


def dump_config(config: BaseModel) -> str:
    """The resolved config as YAML; `load_config` of this text gives the same config back."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
