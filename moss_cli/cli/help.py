"""`--help` whose descriptions stay readable at any width. Typer's Rich panels give the option, its
negative form, the short name and the type a column each, and the description what is left: about
17 columns of an 80-column terminal (or CI log). Below RICH_HELP_WIDTH columns, help is Click's
layout instead: each option with its type, the description beside it from column 30 at most (below
it where the option is longer), so a description has the rest of the line; a group lists each
command with its first sentence whole."""

from __future__ import annotations

import click
from rich.console import Console
from typer import rich_utils
from typer.core import TyperCommand, TyperGroup

RICH_HELP_WIDTH = 150  # from here on the panels leave every command's descriptions 40 columns or more


def _panels_fit() -> bool:
    """Whether the console Typer would draw its help on is wide enough for the panels."""
    return Console(width=rich_utils.MAX_WIDTH).width >= RICH_HELP_WIDTH


class HelpCommand(TyperCommand):
    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if _panels_fit():
            return super().format_help(ctx, formatter)
        return super(TyperCommand, self).format_help(ctx, formatter)  # Click's own layout

    def get_short_help_str(self, limit: int = 45) -> str:
        """The first sentence whole, in a group's list of commands (Click cuts it at `limit`, with "...")."""
        return super().get_short_help_str(limit=1_000)


class HelpGroup(TyperGroup):
    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if _panels_fit():
            return super().format_help(ctx, formatter)
        return super(TyperGroup, self).format_help(ctx, formatter)

    def get_short_help_str(self, limit: int = 45) -> str:
        return super().get_short_help_str(limit=1_000)
