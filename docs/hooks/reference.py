"""MkDocs hook: the configuration reference page is generated from the schema at build time
(`vidtx.config.fields`), so the docs never repeat a default or a description by hand."""

from __future__ import annotations

from typing import Any

from vidtx.config.fields import SECTIONS, section_summary, settings

MARKER = "<!-- settings -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(section: str) -> str:
    rows = [
        f"| `{s.key}` | {_cell(' | '.join(s.choices) or s.type)} | `{_cell(s.default)}` | {_cell(s.description)} |"
        for s in settings([section])
    ]
    header = "| setting | type or choices | default | description |\n|---|---|---|---|"
    return f"## `{section}`\n\n{section_summary(section)}\n\n{header}\n" + "\n".join(rows)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, "\n\n".join(_table(section) for section in SECTIONS))
