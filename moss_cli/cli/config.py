"""`moss config show`: the resolved stage-0 sampling parameters and where each came from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..assets import TINY_DEPLOY
from ..config.deploy import DRIVES_NOTE, PLATFORMS, load_deploy
from ..config.shown import HEADERS, as_dict, shown, title
from ..errors import MossError
from ..report.terminal import print_table
from .common import stdout, user_errors
from .help import HelpCommand, HelpGroup

app = typer.Typer(cls=HelpGroup, help="Inspect deploy configs.", no_args_is_help=True)


DeployFile = Annotated[
    Optional[Path],
    typer.Argument(metavar="DEPLOY", help="Deploy YAML (default: the shipped tiny recipe).", show_default=False),
]
DeployAsOption = Annotated[Optional[Path], typer.Option(help="DEPLOY, as an option (as the other commands take it).")]
Platform = Annotated[str, typer.Option(help=f"Platform section to apply: {', '.join(PLATFORMS)}.")]
Builtin = Annotated[
    bool, typer.Option("--builtin", help="Show the built-in defaults (vllm-omni's MOSS-TTS-Local v1.5 deploy file).")
]
AllowForeign = Annotated[
    bool, typer.Option(help="Show a deploy file written for another model (a warning instead of an error).")
]
AsJson = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


@app.command("show", cls=HelpCommand)
def show(
    file: DeployFile = None,
    deploy: DeployAsOption = None,
    platform: Platform = "cpu",
    builtin: Builtin = False,
    allow_foreign_deploy: AllowForeign = False,
    as_json: AsJson = False,
) -> None:
    """Print stage 0's default sampling params, max_num_seqs, max_model_len and codec streaming keys,
    each with the file and line it came from (after base_config and platform merges) and what it
    drives in a vllm-omni MOSS-TTS-Local deployment and in moss."""
    with user_errors():
        if file is not None and deploy is not None:
            raise MossError("give the deploy file once: as DEPLOY or with --deploy", field="--deploy")
        deploy = file or deploy
        if builtin and deploy is not None:
            raise MossError(
                "shows vllm-omni's built-in defaults, not a deploy file: give one or the other", field="--builtin"
            )
        config = load_deploy(
            None if builtin else (deploy or TINY_DEPLOY), platform.lower(), allow_foreign=allow_foreign_deploy
        )
    if as_json:
        stdout.print_json(json.dumps(as_dict(config, platform)))
        return
    rows = [[escape(cell) for cell in shown_value.cells()] for shown_value in shown(config)]
    print_table(stdout, HEADERS, rows, title=escape(title(config, platform)), right=("value",))
    stdout.print(DRIVES_NOTE, highlight=False)
