"""`--help` that a person can read and copy at any width: Click's layout (each option with its
placeholder, the description beside it from column 30 at most, below it where the option is longer),
wrapped at spaces only, so an option's name (`--fail-on-empty`), a value (`seeded-neighbours`) or a
command stays whole on one line; a group lists each command with its first sentence whole.
Placeholders say what a value is: an argument by its name (`REQUESTS`), a flag by nothing, text by
what it holds (`URL`, `wav|flac`), numbers and paths by their type (`<int>`, `<path>`).

Typer's Rich panels are not used: they give the option, its negative form and the type a column each
and the description what is left (17 columns of 80; at 200, descriptions start near column 95), cut
long values with "…" and break words at hyphens."""

from __future__ import annotations

import textwrap
from typing import Sequence

import click
from typer.core import TyperCommand, TyperGroup

from ..speech_api import RESPONSE_FORMATS

# A free-form value's placeholder, where a type name (`<str>`) would say nothing; a value from a fixed set
# that a command defines declares it as its metavar there (`--level codes|waveform|speech|bitwise`).
PLACEHOLDERS = {
    "--server": "URL",
    "--header": "'NAME: VALUE'",
    "--api-key": "KEY",
    "--served-model": "NAME",
    "--ray-address": "ADDRESS",
    "--host": "HOST",
    "--format": "wav|flac",
    "--response-format": "|".join(RESPONSE_FORMATS),
    "--layout": "auto|blocks|blocks:R",
    "--scenarios": "NAME,NAME,...",
    "--batch": "N,N,...",
    "--concurrency": "N,N,...",
    "--modes": "MODE,MODE,...",
    "--arms": "ARM,ARM,...",
    "--random-weights": "tiny|35m|v1.5",
}


def placeholders(params: Sequence) -> None:
    """Each parameter's placeholder as a person reads and copies it: an argument by its name in capitals
    (`REQUESTS`, `A B`), an on/off flag by nothing, a text value by what it holds (PLACEHOLDERS, else its
    name in capitals); numbers and paths keep their type's (`<int>`, `<path>`)."""
    for param in params:
        if param.metavar is not None:
            continue
        if param.param_type_name == "argument":
            param.metavar = param.name.upper()
        elif getattr(param, "is_flag", False):
            param.metavar = ""
        elif "str" in _shown_type(param):
            param.metavar = PLACEHOLDERS.get(param.opts[0], param.name.upper())


def _shown_type(param) -> str:
    """The type Typer would show (`<str>`, `<list[str]>`, `<int>`), as its release says it."""
    ctx = click.Context(click.Command("moss"))
    for way in ("display_type_rich", "make_metavar"):  # Typer 0.29; Typer 0.27
        shown = getattr(param, way, None)
        if shown is not None:
            try:
                return str(shown(ctx) or "")
            except (TypeError, AttributeError):
                continue
    return ""


def lines(text: str, width: int) -> list[str]:
    """`text` wrapped to `width` at spaces only, paragraph by paragraph (a blank line between them). Some
    Typer releases escape `[` for Rich markup in the help they hand over (`\\[required]`): this layout is
    no Rich markup, so the escape goes."""
    out: list[str] = []
    for paragraph in textwrap.dedent(text.replace("\\[", "[")).strip().split("\n\n"):
        words = " ".join(paragraph.split())
        wrapped = textwrap.wrap(words, width, break_on_hyphens=False, break_long_words=False)
        out += ([""] if out else []) + (wrapped or [""])
    return out


def write_text(formatter, text: str) -> None:
    """A paragraph of help at the formatter's indent, wrapped at spaces."""
    indent = " " * formatter.current_indent
    for line in lines(text, max(formatter.width - formatter.current_indent, 20)):
        formatter.write(f"{indent}{line}\n" if line else "\n")


def write_dl(formatter, rows, col_max: int = 30, col_spacing: int = 2) -> None:
    """Terms and their descriptions: a description beside its term from the column after the widest
    term (at most `col_max`), below it where the term is longer; wrapped at spaces."""
    rows = list(rows)
    first = min(max((len(term) for term, _ in rows), default=0), col_max)
    column = formatter.current_indent + first + col_spacing
    for term, text in rows:
        formatter.write(" " * formatter.current_indent + term)
        if not text:
            formatter.write("\n")
            continue
        described = lines(text, max(formatter.width - column, 20))
        if len(term) <= first:
            formatter.write(" " * (column - formatter.current_indent - len(term)) + described[0] + "\n")
            described = described[1:]
        else:
            formatter.write("\n")
        for line in described:
            formatter.write(" " * column + line + "\n" if line else "\n")


def help_text(command: click.Command, ctx: click.Context) -> str:
    """`command`'s help in Click's layout, through a formatter that wraps at spaces only."""
    formatter = ctx.make_formatter()
    formatter.write_text = lambda text: write_text(formatter, text)
    formatter.write_dl = lambda rows, col_max=30, col_spacing=2: write_dl(formatter, rows, col_max, col_spacing)
    command.format_help(ctx, formatter)
    return formatter.getvalue().rstrip("\n")


def usage_pieces(command: click.Command, ctx: click.Context) -> list[str]:
    """The usage line after the command's name: `[OPTIONS] REQUESTS`, an optional argument in brackets."""
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if param.param_type_name == "argument":
            pieces.append(param.metavar if param.required else f"[{param.metavar}]")
    return pieces


class HelpCommand(TyperCommand):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        placeholders(self.params)

    def get_help(self, ctx: click.Context) -> str:
        return help_text(self, ctx)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        return super(TyperCommand, self).format_help(ctx, formatter)  # Click's own layout

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return usage_pieces(self, ctx)

    def get_short_help_str(self, limit: int = 45) -> str:
        """The first sentence whole, in a group's list of commands (Click cuts it at `limit`, with "...")."""
        return super().get_short_help_str(limit=1_000)


class HelpGroup(TyperGroup):
    def get_help(self, ctx: click.Context) -> str:
        return help_text(self, ctx)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        return super(TyperGroup, self).format_help(ctx, formatter)

    def get_short_help_str(self, limit: int = 45) -> str:
        return super().get_short_help_str(limit=1_000)
