"""Reading the cluster infrastructure in infra/ for the static checks in tests/test_infra_*.py: the manifests
as parsed documents, the names they must agree on (infra/names.yaml), and the compose environment.

Imported as `from infra_manifests import ...` (tests/ is on sys.path under pytest, see media.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from vidtx.config import PipelineConfig, load_config

ROOT = Path(__file__).resolve().parent.parent
INFRA = ROOT / "infra"
NAMES = yaml.safe_load((INFRA / "names.yaml").read_text())
MANIFESTS = sorted(p for p in INFRA.rglob("*") if p.suffix in {".yaml", ".yml", ".json"})


# --- documents ------------------------------------------------------------------------------------


def load(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    return [json.loads(text)] if path.suffix == ".json" else [d for d in yaml.safe_load_all(text) if d]


def docs(relative: str) -> list[dict[str, Any]]:
    return load(INFRA / relative)


def doc(relative: str) -> dict[str, Any]:
    (only,) = docs(relative)
    return only


def walk(node: Any) -> Iterator[tuple[str | int | None, Any]]:
    """(key, value) for every value of a nested structure; key None for the root."""
    stack: list[tuple[str | int | None, Any]] = [(None, node)]
    while stack:
        key, value = stack.pop()
        yield key, value
        if isinstance(value, dict):
            stack.extend(value.items())
        elif isinstance(value, list):
            stack.extend(enumerate(value))


def pod_specs(node: Any) -> list[dict[str, Any]]:
    """Every Kubernetes pod spec (a mapping with `containers`) inside `node`."""
    return [v for _, v in walk(node) if isinstance(v, dict) and isinstance(v.get("containers"), list)]


def containers(node: Any) -> list[dict[str, Any]]:
    return [c for spec in pod_specs(node) for c in spec["containers"]]


def image(name: str) -> str:
    return f"{NAMES['registry']}/{NAMES['images'][name]}:{NAMES['version']}"


# --- environment: compose's env file and interpolation, container env -----------------------------


def env_file(path: Path) -> dict[str, str]:
    pairs = (
        line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")
    )
    return dict(pairs)


ENV_EXAMPLE = env_file(INFRA / "docker/env.example")
COMPOSE = doc("docker/compose.yaml")
COMPOSE_VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def compose_value(text: str) -> str:
    """Interpolate like `docker compose` with env.example as the .env file."""

    def value(match: re.Match[str]) -> str:
        name, kind, default = match.groups()
        return ENV_EXAMPLE.get(name, default if kind == "-" else "")

    return COMPOSE_VARIABLE.sub(value, text)


def env_names(container: dict[str, Any]) -> set[str]:
    env = container.get("env") or container.get("environment") or []
    return set(env) if isinstance(env, dict) else {entry["name"] for entry in env}


def env_value(container: dict[str, Any], name: str) -> str:
    env = container.get("env") or container.get("environment") or []
    if isinstance(env, dict):
        return compose_value(str(env[name]))
    return next(entry["value"] for entry in env if entry["name"] == name)


# --- SeaweedFS's command lines ---------------------------------------------------------------------


def weed_flags(args: list[str]) -> dict[str, str]:
    """{name: value} of a `weed` command's `-name=value` arguments (quotes of a shell line dropped)."""
    pairs = (arg.lstrip("-").split("=", 1) for arg in args if arg.startswith("-") and "=" in arg)
    return {name: value.strip('"') for name, value in pairs}


def weed_settings(args: list[str]) -> dict[str, str]:
    """A `weed` command's flags less its addresses, ports and paths, which differ by place: what the
    local stack, compose and Kubernetes must run alike (a port of 0 turns a server off, and is kept)."""

    def place(name: str, value: str) -> bool:
        port = name == "port" or name.startswith("port.") or ".port" in name
        return name in {"dir", "ip", "ip.bind", "filer", "config"} or (port and value != "0")

    return {name: value for name, value in weed_flags(args).items() if not place(name, value)}


def assert_deployment_runs(deployment: dict[str, Any], expected: PipelineConfig) -> None:
    """The deployment's parameters are `expected`: its run form's config file with its overrides, or
    (batch-predict) the demo's test videos into its workdir."""
    settings = deployment["parameters"]["settings"]
    if "config" in settings:
        assert load_config(ROOT / settings["config"], settings.get("overrides", [])) == expected
    else:
        assert settings["videos"] == [str(expected.synth.output / expected.eval.split)]
        assert Path(settings["output"]).parent == expected.workdir
