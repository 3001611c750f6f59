"""The `moss` command line: a thin Typer layer over the library."""

from __future__ import annotations

import typer

from .. import __version__
from . import config
from .audit import audit_determinism
from .bench import bench
from .common import OneErrorStyle
from .diff import diff
from .help import HelpCommand
from .options import typed_params
from .serve import serve
from .synth import synth

app = typer.Typer(
    name="moss",
    cls=OneErrorStyle,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command's -h, as other tools have
    help="Batch speech synthesis with MOSS-TTS-Local, and audits that prove it is reproducible.",
)
app.command("synth", cls=HelpCommand)(typed_params(synth))
app.command("audit-determinism", cls=HelpCommand)(typed_params(audit_determinism))
app.command("bench", cls=HelpCommand)(typed_params(bench))
app.command("diff", cls=HelpCommand)(typed_params(diff))
app.command("serve", cls=HelpCommand)(typed_params(serve))
app.add_typer(config.app, name="config")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"moss {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    pass


def main() -> None:
    app()
