"""Markdown tables: how vidtx shows rows of results to people (terminals, Prefect artifacts, model
cards and README sections all read Markdown)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """`header` and `rows` as a Markdown table (cells as `str()` gives them)."""
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
