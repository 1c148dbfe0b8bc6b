"""The import graph of vidtx/ and flows/, read with `ast` (function-level imports included), against
the layering of ARCHITECTURE.md: no cycle, no import up the layers, and the rules below, the "never"
and "only" rules over what a module pulls in transitively, not only over what it names. The tree
section of ARCHITECTURE.md names every module file, and no other."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Top to bottom. A module may import from lower layers and from its own package (or module), nothing
# else of vidtx or flows. ARCHITECTURE.md shows the same table.
LAYERS: list[tuple[str, ...]] = [
    ("flows",),
    ("vidtx.__main__",),
    ("vidtx.cli",),
    ("vidtx.cli_help",),
    ("vidtx.stages", "vidtx.gpu_plan"),
    ("vidtx.train",),
    ("vidtx.tracking",),
    ("vidtx.serving",),
    ("vidtx.eval",),
    ("vidtx.data", "vidtx.shard", "vidtx.model_factory"),
    ("vidtx.clips",),
    ("vidtx.manifest", "vidtx.media", "vidtx.models", "vidtx.cache"),
    ("vidtx.storage",),
    ("vidtx.nn", "vidtx.config", "vidtx.markdown", "vidtx.ray_session", "vidtx.processes", "vidtx.files"),
    ("vidtx.log", "vidtx.env", "vidtx.locations", "vidtx.results"),
]
# (importer, imported, why): direct imports that are never allowed, whatever the layers say.
FORBIDDEN: list[tuple[str, str, str]] = [
    ("flows", "mlflow", "flows reach MLflow only through vidtx.tracking"),
]
# (importer, imported, why): what a module must never pull in, directly or through any chain of imports.
NEVER_REACHES: list[tuple[str, str, str]] = [
    ("vidtx", "prefect", "the library never imports Prefect: flows/ orchestrate it"),
    ("vidtx.eval", "vidtx.train", "evaluation must not pull in Ray Train and DeepSpeed"),
    ("vidtx.eval", "deepspeed", "evaluation must not pull in Ray Train and DeepSpeed"),
    *[
        (light, heavy, "the served model and the one-video path load what a serving container has")
        for light in ("vidtx.serving", "vidtx.clips")
        for heavy in ("vidtx.train", "vidtx.data", "vidtx.shard", "ray", "deepspeed", "webdataset", "PIL")
    ],
]
# Packages whose whole import closure is the standard library, themselves and these.
ONLY: dict[str, set[str]] = {
    "vidtx.nn": {"torch"},
    "vidtx.models": {"torch", "vidtx.nn", "safetensors"},  # the format released weights come in
    "vidtx.config": {"pydantic", "pydantic_core", "yaml", "vidtx.locations"},
    "vidtx.results": set(),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_modules() -> dict[str, Path]:
    files = [*ROOT.joinpath("vidtx").rglob("*.py"), *ROOT.joinpath("flows").rglob("*.py")]
    return {module_name(path): path for path in sorted(files)}


def imported_names(path: Path, module: str) -> set[str]:
    """Every module named by an import statement anywhere in the file (`from a import b` gives `a.b`
    as well as `a`: b may be a submodule)."""
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, and each third-party top-level name it imports."""
    modules = source_modules()
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(path, module):
            if name in modules:
                targets.add(name)
            elif name.partition(".")[0] not in {"vidtx", "flows"}:
                targets.add(name.partition(".")[0])
        targets.discard(module)
        graph[module] = targets
    return graph


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> tuple[int, str] | None:
    if module == "vidtx":  # the package's own __init__: its version, nothing else
        return len(LAYERS), module
    for index, layer in enumerate(LAYERS):
        for prefix in layer:
            if within(module, prefix):
                return index, prefix
    return None


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def reached(graph: dict[str, set[str]], module: str) -> dict[str, str]:
    """Everything `module` pulls in, directly or not: name -> the module that imports it (for the path)."""
    via: dict[str, str] = {}
    pending = [module]
    while pending:
        importer = pending.pop()
        for target in graph.get(importer, ()):
            if target not in via and target != module:
                via[target] = importer
                pending.append(target)
    return via


def chain(via: dict[str, str], module: str, target: str) -> str:
    path = [target]
    while path[-1] != module and path[-1] in via:
        path.append(via[path[-1]])
    return " -> ".join(reversed(path))


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every edge that breaks the layering or a forbidden-edge rule, every module that reaches what a
    never- or only-rule keeps from it, and every cycle."""
    problems = [f"import cycle: {' <-> '.join(cycle)}" for cycle in find_cycles(graph)]
    for module, targets in sorted(graph.items()):
        placed = layer_of(module)
        if placed is None:
            problems.append(f"{module}: in no layer of LAYERS")
            continue
        via = reached(graph, module)
        for target in sorted(via):
            for importer, imported, why in NEVER_REACHES:
                if within(module, importer) and within(target, imported):
                    problems.append(f"{chain(via, module, target)}: {why}")
            for package, allowed in ONLY.items():
                own = within(target, package) or target in sys.stdlib_module_names
                if within(module, package) and not own and not any(within(target, a) for a in allowed):
                    problems.append(f"{chain(via, module, target)}: {package} reaches only {sorted(allowed)}")
        for target in sorted(targets):
            for importer, imported, why in FORBIDDEN:
                if within(module, importer) and within(target, imported):
                    problems.append(f"{module} -> {target}: {why}")
            if (target_layer := layer_of(target)) is None:
                continue  # third party: only the rules above apply
            same_package = target_layer[1] == placed[1]
            if not same_package and target_layer[0] <= placed[0]:
                direction = "up" if target_layer[0] < placed[0] else "sideways"
                problems.append(f"{module} -> {target}: imports {direction} ({target_layer[1]})")
    return problems


def test_the_import_graph_follows_the_layers() -> None:
    assert violations(import_graph()) == []


def test_every_module_has_a_layer_and_imports_are_seen_inside_functions() -> None:
    graph = import_graph()
    assert all(layer_of(module) for module in graph)
    # cli.py imports its commands' modules inside the commands
    assert {"vidtx.stages.predict", "vidtx.stages.shard", "vidtx.gpu_plan"} <= graph["vidtx.cli"]


EARLIER_CYCLES: list[Iterable[tuple[str, str]]] = [
    # the three cycles of the tree before the layering, each once hidden behind a function-level import
    [("vidtx.config.schema", "vidtx.models.presets"), ("vidtx.models.presets", "vidtx.config.schema")],
    [
        ("vidtx.eval.multiview", "vidtx.tracking.model_registry"),
        ("vidtx.tracking.model_registry", "vidtx.eval.multiview"),
    ],
    [("vidtx.train.launcher", "vidtx.train.jobs"), ("vidtx.train.jobs", "vidtx.train.launcher")],
]


@pytest.mark.parametrize("edges", EARLIER_CYCLES, ids=["config-models", "eval-tracking", "launcher-jobs"])
def test_the_check_fails_on_each_earlier_cycle(edges: list[tuple[str, str]]) -> None:
    graph = import_graph()
    for importer, imported in edges:
        graph[importer] = graph[importer] | {imported}
    problems = violations(graph)
    assert any(problem.startswith("import cycle") and edges[0][0] in problem for problem in problems)


@pytest.mark.parametrize(
    ("importer", "imported", "message"),
    [
        ("vidtx.eval.multiview", "vidtx.train.checkpoint", "Ray Train and DeepSpeed"),
        ("vidtx.data.eval_loader", "prefect", "never imports Prefect"),
        ("flows.train", "mlflow", "through vidtx.tracking"),
        ("vidtx.models.xvit", "numpy", "reaches only"),
        ("vidtx.clips.views", "vidtx.data.transforms", "what a serving container has"),
        ("vidtx.serving.classifier", "vidtx.stages.ray_scoring", "what a serving container has"),
        ("vidtx.config.schema", "vidtx.models", "imports up"),
        ("vidtx.shard.writer", "vidtx.data.eval_loader", "imports sideways"),
    ],
)
def test_the_check_fails_on_a_forbidden_edge(importer: str, imported: str, message: str) -> None:
    graph = import_graph()
    graph[importer] = graph[importer] | {imported}
    assert any(message in problem for problem in violations(graph) if problem.startswith(importer))


def test_no_library_module_is_over_300_lines_and_the_cli_is_thin() -> None:
    lengths = {module: len(path.read_text().splitlines()) for module, path in source_modules().items()}
    assert {module: n for module, n in lengths.items() if n > 300} == {}
    assert lengths["vidtx.cli"] < 295  # a command (15 now) is its signature and a call into the library


HEAVY = {"ray", "webdataset", "deepspeed", "PIL", "vidtx.data.augment", "vidtx.data.transforms"}


@pytest.mark.parametrize(
    "entry", ["vidtx.serving.pyfunc_model", "vidtx.serving.pyfunc_encoder", "vidtx.stages.predict"]
)
def test_the_served_model_and_predict_load_nothing_heavy(entry: str) -> None:
    """What a fresh interpreter has loaded after importing the served model (what MLflow runs in a
    serving container) or `vidtx predict`'s stage: neither Ray, webdataset, DeepSpeed, PIL nor
    training's augmentation, nor the training or sharding packages."""
    code = f"import sys, {entry}; print(' '.join(sys.modules))"
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert entry in loaded
    assert loaded & HEAVY == set()
    assert [module for module in loaded if module.startswith(("vidtx.train", "vidtx.data"))] == []


def test_only_storage_asks_whether_a_location_is_in_a_bucket() -> None:
    """Outside `vidtx.storage`, code joins, lists, opens, copies and caches locations through it and
    never branches on the scheme itself."""
    callers = [
        module for module, path in source_modules().items()
        if "is_remote(" in path.read_text() and not within(module, "vidtx.storage")
    ]  # fmt: skip
    assert callers == []


def test_the_architecture_page_names_every_module_file_and_no_other() -> None:
    page = (ROOT / "ARCHITECTURE.md").read_text()
    tree = page[page.index("## The tree") : page.index("## Boundary types")]
    named = set(re.findall(r"^\| `((?:vidtx|flows)/[\w/]+\.py)` \|", tree, re.MULTILINE))
    files = {str(path.relative_to(ROOT)) for path in source_modules().values()}
    assert (sorted(files - named), sorted(named - files)) == ([], [])
