"""MkDocs hook: the pages' generated tables, built from their sources when the site is built, so the
docs never repeat a default or a measured figure by hand.

- `<!-- settings -->`: every setting of the schema, one table per section (`vidtx.config.fields`).
- `<!-- benchmarks -->`: every measured benchmark of `benchmarks/results/<name>.json` with its date,
  machine and the command that reproduces it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vidtx.config.fields import SECTIONS, section_summary, settings

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
RESULTS_URL = "https://github.com/vidtx/vidtx/blob/main/benchmarks/results"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _settings_table(section: str) -> str:
    rows = [
        f"| `{s.key}` | {_cell(s.kind)} | `{_cell(s.default)}` | {_cell(s.description)} |"
        for s in settings([section])
    ]
    header = "| setting | type or choices | default | description |\n|---|---|---|---|"
    return f"## `{section}`\n\n{section_summary(section)}\n\n{header}\n" + "\n".join(rows)


def _benchmark_row(path: Path) -> str:
    result = json.loads(path.read_text())
    env = result["environment"]
    machine = f"{env['gpu']}" if env.get("gpu") else f"{env['cpu']}, {env['cpus_usable']} cores"
    command = "python -m benchmarks.gpu" if env.get("gpu") else f"python -m benchmarks.run {result['name']}"
    tables = f"[{result['name']}.md]({RESULTS_URL}/{result['name']}.md)"
    return f"| {_cell(result['title'])} | {env['date'][:10]} | {machine} | `{command}` | {tables} |"


def _benchmarks_table() -> str:
    header = "| benchmark | measured | machine | reproduce | tables and raw samples |\n|---|---|---|---|---|"
    return header + "\n" + "\n".join(_benchmark_row(path) for path in sorted(RESULTS.glob("*.json")))


GENERATED = {
    "<!-- settings -->": lambda: "\n\n".join(_settings_table(section) for section in SECTIONS),
    "<!-- benchmarks -->": _benchmarks_table,
}


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    for marker, build in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, build())
    return markdown
