"""`moss synth`: synthesise a request file into audio files and a manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..synth import SynthOptions, synthesize
from .common import Device, DType, interactive, stderr, stdout, user_errors




def synth(
    requests: Annotated[Path, typer.Argument(help="Request file: .jsonl, .csv or .txt (one utterance per line).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory for audio files and manifest.csv.")] = Path("out"),
    deploy: Annotated[Optional[Path], typer.Option(help="vllm-omni deploy YAML (default: the tiny recipe, or the "
                                                         "published v1.5 defaults with --model).")] = None,
    allow_foreign_deploy: Annotated[bool, typer.Option(help="Use a deploy file written for another model "
                                                       "(a warning instead of an error).")] = False,
    model: Annotated[Optional[Path], typer.Option(help="Talker checkpoint directory (default: the shipped tiny one).")] = None,
    codec: Annotated[Optional[Path], typer.Option(help="Audio tokenizer checkpoint directory (with --model).")] = None,
    device: Annotated[Device, typer.Option(help="Where to run.")] = Device.auto,
    dtype: Annotated[DType, typer.Option(help="Model dtype (auto: float32 on CPU, bfloat16 elsewhere).")] = DType.auto,
    max_batch: Annotated[Optional[int], typer.Option(min=1, help="Requests in flight at once "
                                                     "(default: stage-0 max_num_seqs).")] = None,
    threads: Annotated[Optional[int], typer.Option(min=1, help="CPU threads for torch (default: torch's choice; "
                                                   "1 suits tiny models on a busy machine).")] = None,
    audio_format: Annotated[str, typer.Option("--format", help="Audio file format: wav or flac.")] = "wav",
    legacy_global_rng: Annotated[bool, typer.Option(help="Negative control: every request draws from the one "
                                                   "global RNG in batch order (the pre-fix behaviour).")] = False,
    batch_invariant: Annotated[bool, typer.Option("--batch-invariant/--no-batch-invariant", help="Compute every "
                                                 "request bitwise as if it ran alone (default); off: faster "
                                                 "kernels whose rounding depends on the batch.")] = True,
    dry_run: Annotated[bool, typer.Option(help="Validate the requests, deploy config and checkpoint configs, "
                                                "print what would run, and stop.")] = False,
    force: Annotated[bool, typer.Option(help="Regenerate everything, even outputs of an earlier run.")] = False,
    stream: Annotated[bool, typer.Option(help="Decode each request while it is generated, in the deploy's codec "
                                              "chunks, writing its file progressively (time to first audio and "
                                              "chunk timings go to the manifest).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a machine-readable summary on stdout.")] = False,
) -> None:
    """Synthesise every request, writing OUT/<id>.<format> and OUT/manifest.csv.

    Re-running the same command on the same --out resumes: requests whose outputs exist and match
    are skipped. Exit codes: 0 done, 2 bad input or runtime error, 130/143 interrupted (SIGINT/SIGTERM)."""
    options = SynthOptions(deploy=deploy, model=model, codec=codec, device=device.value, dtype=dtype.value,
                           max_batch=max_batch, legacy_global_rng=legacy_global_rng, batch_invariant=batch_invariant,
                           allow_foreign_deploy=allow_foreign_deploy)
    if threads:
        torch.set_num_threads(threads)
    with user_errors():
        if interactive():
            with Progress(TextColumn("[bold]synth"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          TextColumn("{task.description}"), console=stderr, transient=True) as progress:
                task = progress.add_task("", total=None)
                summary = synthesize(
                    requests, out, options, audio_format=audio_format.lower(), dry_run=dry_run, force=force,
                    stream=stream, on_start=lambda n, done: progress.update(task, total=n, completed=done),
                    on_result=lambda r: progress.update(task, advance=1, description=r.request.id))
        else:
            summary = synthesize(requests, out, options, audio_format=audio_format.lower(), dry_run=dry_run,
                                 force=force, stream=stream)
    if as_json:
        stdout.print_json(json.dumps(summary.as_dict()))
        return
    if summary.dry_run:
        table = Table(title=f"moss synth --dry-run: {requests} is valid")
        for column in ("requests", "frame budget", "max audio s", "seeds (request/deploy/none)"):
            table.add_column(column, justify="right")
        seeds = "/".join(str(summary.seed_sources.get(k, 0)) for k in ("request", "deploy", "none"))
        table.add_row(str(summary.requests), str(summary.frame_budget), f"{summary.frame_budget / summary.frame_rate:.1f}", seeds)
        stdout.print(table)
        return
    table = Table(title=f"moss synth → {summary.out}", show_header=True)
    for column in ("requests", "resumed", "audio s", "wall s", "real-time factor"):
        table.add_column(column, justify="right")
    table.add_row(str(summary.requests), str(summary.resumed), f"{summary.audio_s:.2f}", f"{summary.wall_s:.2f}",
                  f"{summary.real_time_factor:.3f}")
    stdout.print(table)
    stdout.print(f"manifest: {summary.manifest}")
