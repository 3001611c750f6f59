"""Every table a command prints on the terminal, drawn by one rule: no cell is ever cut short ("…")
or broken inside a word or a number, at any width. Where the console has room for each column's
longest word, a table whose cells wrap at spaces only (the columns with the most room to wrap give
up their width first); narrower (an 80-column CI log, a small terminal), each row becomes a block of
`header: value` lines. Lines break at spaces only: a word longer than the line (a long path) stays
whole, for the terminal to wrap. `print_warning`: every command's warning line, in one style."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

FRAME = 3  # what the default box and padding add per column (a rule and a space each side), plus one rule


def print_warning(console: Console, text: str) -> None:
    """`warning: text`, as every command shows a warning (its text left whole, as an error's is)."""
    console.print(f"[bold yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)


def print_table(
    console: Console,
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    title: str | None = None,
    right: Collection[str] = (),
) -> None:
    """`rows` of Rich markup cells (escape what the user wrote) under plain `headers`; the columns
    named in `right` are right-justified (figures)."""
    columns = list(zip(*[[Text(h) for h in headers], *[[Text.from_markup(c) for c in row] for row in rows]]))
    if not columns:
        return
    least = [max(1, *(_longest_word(t) for t in column)) for column in columns]  # a word is never broken
    most = [max(1, *(_longest_line(t) for t in column)) for column in columns]
    room = console.width - FRAME * len(columns) - 1
    if sum(least) > room:
        _records(console, title, columns)
        return
    widths = list(most)
    while sum(widths) > room:
        _, i = max((w - low, i) for i, (w, low) in enumerate(zip(widths, least)))
        widths[i] -= 1
    if title:
        _say(console, Text.from_markup(title, style="table.title"))
    table = Table()
    for header, width in zip(headers, widths):
        table.add_column(header, justify="right" if header in right else "left", width=width, overflow="fold")
    for row in list(zip(*columns))[1:]:
        table.add_row(*row)
    console.print(table)


def _records(console: Console, title: str | None, columns: list[tuple[Text, ...]]) -> None:
    """One block of `header: value` lines per row, a blank line between blocks."""
    if title:
        _say(console, Text.from_markup(title, style="table.title"))
    headers, *rows = zip(*columns)
    for n, row in enumerate(rows):
        if n:
            console.print()
        for header, cell in zip(headers, row):
            _say(console, Text.assemble((f"{header.plain}: ", "bold"), cell))


def _say(console: Console, text: Text) -> None:
    """`text` in lines as wide as the console, broken at spaces only: a word longer than a line is left
    whole on its own (Rich's wrapping would fold it), for the terminal to wrap."""
    breaks, start, end = [], 0, 0
    for word in re.finditer(r"\S+", text.plain):
        if end > start and cell_len(text.plain[start : word.end()]) > console.width:
            breaks.append(word.start())
            start = word.start()
        end = word.end()
    for line in text.divide(breaks):
        line.rstrip()
        console.print(line, soft_wrap=True)


def _longest_word(text: Text) -> int:
    return max((cell_len(word) for word in text.plain.split()), default=0)


def _longest_line(text: Text) -> int:
    return max((cell_len(line) for line in text.plain.splitlines()), default=0)
