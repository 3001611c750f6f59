"""What every command shares: consoles, error handling, option types, the progress bar and the
line that reports a re-send to a server."""

from __future__ import annotations

import os
import shlex
import sys
import warnings
from contextlib import contextmanager
from enum import Enum

import typer
from rich.console import Console
from rich.markup import escape

from ..config.deploy import DeployWarning
from ..errors import MossError
from ..report.terminal import print_warning
from .help import HelpGroup

PIPED_WIDTH = 200  # piped or in CI, Rich would draw at 80 columns and break keys and cells mid-word


def _console(stderr: bool = False) -> Console:
    """A terminal's own width; piped, COLUMNS if set, else PIPED_WIDTH."""
    stream = sys.stderr if stderr else sys.stdout
    piped = not (hasattr(stream, "isatty") and stream.isatty())
    return Console(stderr=stderr, width=PIPED_WIDTH if piped and not os.environ.get("COLUMNS") else None)


stdout = _console()
stderr = _console(stderr=True)


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
    npu = "npu"


class DType(str, Enum):
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float64 = "float64"


def interactive() -> bool:
    """Progress bars only for a person at a terminal: not when piped, not in CI. NO_COLOR takes the
    colour away (Rich honours it), not the progress bar."""
    return stderr.is_terminal and not os.environ.get("CI")


class Bar:
    """What a running command shows as it goes (`progress_bar`): a Rich progress bar for a person at a
    terminal; otherwise no bar, and each phase as a line of its own."""

    def __init__(self, command: str, progress=None) -> None:
        self.command, self.progress = command, progress
        self.task = progress.add_task("", total=None) if progress is not None else None

    def start(self, total: int | None, done: int = 0) -> None:
        """`total` steps, `done` of them already (a resumed run)."""
        if self.progress is not None:
            self.progress.update(self.task, total=total, completed=done)

    def advance(self, label: str | None = None) -> None:
        """One step done; `label` (what it was) shows next to the bar."""
        if self.progress is not None:
            self.progress.update(self.task, advance=1, **({"description": escape(label)} if label else {}))

    def phase(self, text: str) -> None:
        """A part of the run starts."""
        if self.progress is not None:
            self.progress.update(self.task, description=escape(text))
        else:
            stderr.print(f"{self.command}: {escape(text)}", highlight=False)


@contextmanager
def progress_bar(command: str, total: int | None = None):
    """The one progress bar of every command (`synth`, `bench --server`): elapsed time and an ETA,
    drawn on stderr and gone when the run ends; only where `interactive()`. Yields a `Bar`."""
    if not interactive():
        yield Bar(command)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn(f"[bold]{command}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    columns += (TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.description}"))
    with Progress(*columns, console=stderr, transient=True) as progress:
        bar = Bar(command, progress)
        bar.start(total)
        yield bar


def show_retry(retry) -> None:
    """A re-send to a server (`remote.client.Retry`), shown as it happens: a flaky server is never
    hidden (the reports list them too)."""
    stderr.print(f"[yellow]retry:[/] {escape(retry.message)}", highlight=False, soft_wrap=True)


def ray_event(message: str) -> None:
    """What happened to the Ray workers of a run (a worker died, restarted), as one line."""
    stderr.print(f"[yellow]ray:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings about the user's files read like our errors: `warning: file:line: message`."""
    where = f"{filename}:{lineno}: " if lineno else ""
    print_warning(stderr, where + str(message))


@contextmanager
def user_errors(resumable: bool = False):
    """Turn problems with the user's input into a message and exit code 2, without a traceback;
    show warnings about the user's files (DeployWarning) as one readable line each. `resumable`: the
    command picks up where an interrupted run stopped (`moss synth`), and the interrupt says so."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", DeployWarning)
        shown = warnings.showwarning
        warnings.showwarning = lambda message, category, *where: (
            _show_warning(message, category, *where)
            if issubclass(category, DeployWarning)
            else shown(message, category, *where)
        )
        with _errors_to_exit_codes(resumable):
            yield


def _error(text: str) -> None:
    stderr.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)


@contextmanager
def _errors_to_exit_codes(resumable: bool):
    try:
        yield
    except MossError as e:
        _error(e.describe())
        raise typer.Exit(2) from None
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", 2)  # SIGINT unless the run says otherwise (SIGTERM: 15)
        resume = "; finished outputs are kept, run the same command again to resume" if resumable else ""
        stderr.print(f"[bold red]interrupted[/] (signal {signum}){resume}")
        raise typer.Exit(128 + signum) from None
    except (RuntimeError, OSError, ValueError, MemoryError) as e:
        if os.environ.get("MOSS_DEBUG"):
            raise
        stderr.print(f"[bold red]error:[/] {type(e).__name__}: {escape(str(e))}", highlight=False, soft_wrap=True)
        stderr.print("(set MOSS_DEBUG=1 for the traceback)", style="dim")
        raise typer.Exit(2) from None


# click's UsageError, the base of its errors about the command line (an unknown option or command, a
# missing argument, a value outside an option's choices or range), from the click Typer runs on (newer
# Typer releases carry their own copy of click).
UsageError = typer.BadParameter.__base__


@contextmanager
def _usage_errors():
    """click's errors about the command line in moss's style, exit 2 (click's code too): one `error:` line,
    `[--option]: what is wrong` where click names the option, and where the help is."""
    try:
        yield
    except UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # a bare `moss` or `moss config`: its help, exit 2
            # The message is the help in Click's layout; Typer's panels were already drawn (an empty message).
            if e.format_message():
                typer.echo(e.format_message())
            raise typer.Exit(e.exit_code) from None
        param = getattr(e, "param", None)
        if type(e) is typer.BadParameter and param is not None:  # a value: name the option, not "Invalid value for"
            name = param.opts[0] if param.param_type_name == "option" else param.human_readable_name
            text = MossError(e.message, field=name).describe()
        else:
            text = e.format_message()
        help_option = f"{e.ctx.command_path} {e.ctx.help_option_names[0]}" if e.ctx is not None else "moss -h"
        _error(f"{text.rstrip('.')} (see {help_option})")
        raise typer.Exit(2) from None


class OneErrorStyle(HelpGroup):
    """The command group of `moss` (help readable at any width: HelpGroup): errors about its command
    line, its subcommands' included, read like moss's own (`_usage_errors`), not in Typer's boxes."""

    def make_context(self, info_name, args, parent=None, **extra):
        with _usage_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx):
        with _usage_errors():
            return super().invoke(ctx)


def command_line(ctx: typer.Context) -> str:
    """The running command as a person would type it: `moss <command>` and the options given on the
    command line or by environment (defaults left out), for the reports to show what was run.
    Credentials never show: URLs lose their user info and query values, headers their values."""
    from ..remote.settings import mask_header, redact

    words = ["moss", ctx.info_name or ""]
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name not in ("COMMANDLINE", "ENVIRONMENT"):
            continue
        value = ctx.params.get(param.name)
        value = value.value if isinstance(value, Enum) else value
        if param.param_type_name == "argument":
            words.append(str(value))
        elif isinstance(value, bool):
            words.append(param.opts[0] if value else (param.secondary_opts or param.opts)[0])
        elif isinstance(value, (list, tuple)):  # a repeatable option: once per value
            for item in value:
                words += [param.opts[0], mask_header(str(item)) if param.name == "header" else str(item)]
        elif value is not None:
            words += [param.opts[0], "***" if param.name == "api_key" else str(value)]
    return redact(shlex.join(words))
