"""`--help` that ends with the settings a command reads, drawn from the schema's table
(`vidtx.config.fields`), and the same panels for `vidtx config fields`."""

from __future__ import annotations

from collections.abc import Iterable

import click
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer import rich_utils
from typer.core import TyperCommand

from vidtx.config.fields import COMMAND_SECTIONS, Setting, section_summary, settings

# The narrowest description column worth a table: below it each setting's description goes on a
# line of its own under its key, type or choices and default (`settings_list`).
MIN_DESCRIPTION_WIDTH = 40
PANEL_WIDTH = 4  # a panel's borders and padding
COLUMN_GAPS = 3 * 2  # two spaces between the table's four columns
# the table's columns before the description: Setting's field -> its header and style
COLUMNS = {"key": ("setting", "bold cyan"), "kind": ("type or choices", "yellow"), "default": ("default", "")}


def settings_table(rows: Iterable[Setting]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold", expand=True)
    for header, style in COLUMNS.values():
        table.add_column(header, style=style, no_wrap=True)
    table.add_column("description", ratio=1)
    for row in rows:
        table.add_row(*map(escape, (row.key, row.kind, row.default, row.description)))
    return table


def settings_list(rows: Iterable[Setting], width: int) -> Group:
    """Each setting as its key, type or choices and default, on one line where they fit `width` (else
    each that does not fit on an indented line of its own), its description indented below."""
    lines: list[RenderableType] = []
    indent = " " * 4
    for row in rows:
        line = Text(row.key, style="bold cyan")
        for cell in (Text(row.kind, style="yellow"), Text(f"default {row.default}")):
            if line.cell_len + 2 + cell.cell_len <= width:
                line.append_text(Text("  ") + cell)
            else:
                lines.append(line)
                line = Text(indent) + cell
        lines += [line, Padding(Text(row.description), (0, 0, 0, len(indent)))]
    return Group(*lines)


def table_fits(rows: list[Setting], width: int) -> bool:
    """Whether a table of `rows` leaves its description column MIN_DESCRIPTION_WIDTH characters at
    `width`, its other cells unwrapped."""
    cells = sum(
        max(len(header), *(len(getattr(row, field)) for row in rows))
        for field, (header, _) in COLUMNS.items()
    )
    return width - PANEL_WIDTH - COLUMN_GAPS - cells >= MIN_DESCRIPTION_WIDTH


def print_settings(sections: Iterable[str] | None, console: Console | None = None) -> None:
    """One panel per section (None: every one): key, type or choices, default (as --set takes it) and
    description of each setting; as a table where it fits the console, else as a list."""
    rows = settings(sections)  # a ConfigError names an unknown section before anything is printed
    console = console or Console(width=rich_utils.MAX_WIDTH)
    for section in dict.fromkeys(row.section for row in rows):
        mine = [row for row in rows if row.section == section]
        fits = table_fits(mine, console.width)
        body = settings_table(mine) if fits else settings_list(mine, console.width - PANEL_WIDTH)
        summary = Text(section_summary(section), style="italic")
        console.print(
            Panel(Group(summary, body), title=f"[bold]{section}[/]", title_align="left", border_style="dim")
        )


def reads(command: str) -> type[TyperCommand]:
    """The command class of `command`: its help ends with the settings of COMMAND_SECTIONS[command]."""

    class SettingsCommand(TyperCommand):
        def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            super().format_help(ctx, formatter)
            console = Console(width=rich_utils.MAX_WIDTH)
            console.print(" Settings it reads, each set with --set KEY=VALUE (all: vidtx config fields):")
            print_settings(COMMAND_SECTIONS[command], console)

    return SettingsCommand
