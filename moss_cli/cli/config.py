"""`moss config show`: the resolved stage-0 sampling parameters and where each came from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..assets import TINY_DEPLOY
from ..config.deploy import DRIVES_NOTE, PLATFORMS, STAGE0_DRIVES, load_deploy
from ..errors import MossError
from ..report.terminal import print_table
from .common import stdout, user_errors
from .help import HelpCommand, HelpGroup

app = typer.Typer(cls=HelpGroup, help="Inspect deploy configs.", no_args_is_help=True)

SHOWN = ("temperature", "top_p", "top_k", "max_tokens", "seed", "repetition_penalty")


@app.command("show", cls=HelpCommand)
def show(
    file: Annotated[
        Optional[Path],
        typer.Argument(metavar="DEPLOY", help="Deploy YAML (default: the shipped tiny recipe).", show_default=False),
    ] = None,
    deploy: Annotated[
        Optional[Path], typer.Option(help="DEPLOY, as an option (as the other commands take it).")
    ] = None,
    platform: Annotated[str, typer.Option(help=f"Platform section to apply: {', '.join(PLATFORMS)}.")] = "cpu",
    builtin: Annotated[
        bool,
        typer.Option("--builtin", help="Show the built-in defaults (vllm-omni's MOSS-TTS-Local v1.5 deploy file)."),
    ] = False,
    allow_foreign_deploy: Annotated[
        bool, typer.Option(help="Show a deploy file written for another model (a warning instead of an error).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
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
    params = config.sampling
    rows = [
        (f"default_sampling_params.{key}", params.get(key), config.source("stages", 0, "default_sampling_params", key))
        for key in SHOWN
    ]
    rows += [
        (key, config.stage(0).get(key), config.source("stages", 0, key)) for key in ("max_num_seqs", "max_model_len")
    ]
    stream = config.codec_stream
    rows += [
        (
            f"connectors.{config.codec_connector}.extra.{key}",
            value,
            config.source("connectors", config.codec_connector, "extra", key),
        )
        for key, value in stream.items()
    ]
    if as_json:
        stdout.print_json(
            json.dumps(
                {
                    "deploy": str(config.path) if config.path else None,
                    "platform": platform,
                    "note": DRIVES_NOTE,
                    "values": {
                        name: {"value": value, "source": str(src), **_drives(name)} for name, value, src in rows
                    },
                }
            )
        )
        return
    cells = [
        [name, "null" if value is None else str(value), str(src), _drives(name)["vllm_omni"], _drives(name)["moss"]]
        for name, value, src in rows
    ]
    print_table(
        stdout,
        ("key", "value", "from", "drives in vllm-omni", "drives in moss"),
        [[escape(cell) for cell in row] for row in cells],
        title=escape(f"stage 0 of {config.path or 'built-in defaults'} (platform {platform})"),
        right=("value",),
    )
    stdout.print(DRIVES_NOTE, highlight=False)


def _drives(name: str) -> dict[str, str]:
    if name.startswith("connectors."):
        return {"vllm_omni": "the codec's streaming chunks", "moss": "the chunks of --stream"}
    vllm_omni, moss = STAGE0_DRIVES.get(name, ("", ""))
    return {"vllm_omni": vllm_omni, "moss": moss}
