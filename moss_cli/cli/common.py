"""What every command shares: consoles, error handling, option types."""

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


def ray_event(message: str) -> None:
    """What happened to the Ray workers of a run (a worker died, restarted), as one line."""
    stderr.print(f"[yellow]ray:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings about the user's files read like our errors: `warning: file:line: message`."""
    where = f"{filename}:{lineno}: " if lineno else ""
    stderr.print(f"[bold yellow]warning:[/] {escape(where + str(message))}", highlight=False, soft_wrap=True)


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


@contextmanager
def _errors_to_exit_codes(resumable: bool):
    try:
        yield
    except MossError as e:
        stderr.print(f"[bold red]error:[/] {escape(e.describe())}", highlight=False, soft_wrap=True)
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
