"""`--help` that ends with the settings a command reads, drawn from the schema's table
(`vidtx.config.fields`), and the same panels for `vidtx config fields`."""

from __future__ import annotations

from collections.abc import Iterable

import click
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from typer import rich_utils
from typer.core import TyperCommand

from vidtx.config.fields import COMMAND_SECTIONS, Setting, section_summary, settings


def settings_table(rows: Iterable[Setting]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold", expand=True)
    table.add_column("setting", style="bold cyan", no_wrap=True)
    table.add_column("type or choices", style="yellow", overflow="fold")
    table.add_column("default", overflow="fold")
    table.add_column("description", ratio=1)
    for row in rows:
        table.add_row(*map(escape, (row.key, row.kind, row.default, row.description)))
    return table


def print_settings(sections: Iterable[str] | None, console: Console | None = None) -> None:
    """One panel per section (None: every one): key, type or choices, default (as --set takes it), description."""
    rows = settings(sections)  # a ConfigError names an unknown section before anything is printed
    console = console or Console(width=rich_utils.MAX_WIDTH)
    for section in dict.fromkeys(row.section for row in rows):
        table = settings_table(row for row in rows if row.section == section)
        title = f"[bold]{section}[/]: {escape(section_summary(section))}"
        console.print(Panel(table, title=title, title_align="left", border_style="dim"))


def reads(command: str) -> type[TyperCommand]:
    """The command class of `command`: its help ends with the settings of COMMAND_SECTIONS[command]."""

    class SettingsCommand(TyperCommand):
        def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            super().format_help(ctx, formatter)
            console = Console(width=rich_utils.MAX_WIDTH)
            console.print(
                " Settings it reads, each set with --set KEY=VALUE (every one: vidtx config fields):"
            )
            print_settings(COMMAND_SECTIONS[command], console)

    return SettingsCommand
