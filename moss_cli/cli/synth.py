"""`moss synth`: synthesise a request file into audio files and a manifest."""

from __future__ import annotations

import json
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from ..report.terminal import print_table
from . import options as opt
from . import server_options as srv
from .common import interactive, ray_event, stderr, stdout, user_errors

if TYPE_CHECKING:
    from ..jobs.job import SynthSummary


@opt.with_options(opt.ENGINE_OPTIONS, srv.SERVER_OPTIONS, opt.RAY_OPTIONS)
def synth(
    ctx: typer.Context,
    requests: Annotated[Path, typer.Argument(help="Request file: .jsonl, .csv or .txt (one utterance per line).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory for audio files and manifest.csv.")] = Path(
        "out"
    ),
    audio_format: Annotated[str, typer.Option("--format", help="Audio file format: wav or flac.")] = "wav",
    dry_run: Annotated[
        bool,
        typer.Option(
            help="Validate the requests, deploy config and checkpoint configs, print what would run, and stop."
        ),
    ] = False,
    force: Annotated[bool, typer.Option(help="Regenerate everything, even outputs of an earlier run.")] = False,
    stream: Annotated[
        bool,
        typer.Option(
            help="Decode each request while it is generated, in the deploy's codec "
            "chunks, writing its file progressively (time to first audio and "
            "chunk timings go to the manifest)."
        ),
    ] = False,
    fail_on_empty: Annotated[
        bool, typer.Option(help="Exit 1 when a request produced no audio (its stop head fired at the first frame).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a machine-readable summary on stdout.")] = False,
) -> None:
    """Synthesise every request, writing OUT/<id>.<format> and OUT/manifest.csv.

    Re-running the same command on the same --out resumes: requests whose outputs exist and match
    are skipped. Exit codes: 0 done, 1 done but --fail-on-empty found an empty result, 2 bad input or
    runtime error, 130/143 interrupted (SIGINT/SIGTERM). With --server, a running speech server
    (vllm-omni, or moss serve) synthesises instead, with the same output directory and resume."""
    with user_errors(resumable=True):  # torch loads inside, not for --help
        run = dict(audio_format=audio_format.lower(), dry_run=dry_run, force=force)
        if ctx.params["server"]:
            run["allow_dropped_fields"] = ctx.params["allow_dropped_fields"]
            srv.refuse_local_options(ctx)
            summary = _through_server(requests, out, srv.server_settings(ctx.params), run)
        else:
            srv.refuse_server_options(ctx)
            summary = _locally(requests, out, run, stream, opt.ray_cluster(ctx.params), opt.synth_options(ctx.params))
    if as_json:
        stdout.print_json(json.dumps(summary.as_dict()))
    else:
        print_summary(summary, requests)
    if fail_on_empty and summary.empty and not summary.dry_run:
        stderr.print(
            f"[bold red]error:[/] {len(summary.empty)} request(s) produced no audio: {_some(summary.empty)}",
            soft_wrap=True,
        )
        raise typer.Exit(1)


def _locally(requests: Path, out: Path, run: dict, stream: bool, cluster, options) -> SynthSummary:
    """This process validates and writes; the engine runs here, or on Ray workers with --ray."""
    from ..jobs.local import synthesize

    if cluster is not None:
        from ..jobs.ray import synthesize_on_ray

        synthesize = partial(synthesize_on_ray, cluster, on_event=ray_event)

    if interactive():
        with progress_bar() as (on_start, on_result):
            return synthesize(requests, out, options, stream=stream, on_start=on_start, on_result=on_result, **run)
    return synthesize(requests, out, options, stream=stream, **run)


def _through_server(requests: Path, out: Path, server, run: dict) -> SynthSummary:
    """Each re-send is shown as it happens: a flaky server is never hidden."""
    from ..jobs.server import synthesize_remote

    def on_retry(retry) -> None:
        stderr.print(f"[yellow]retry:[/] {escape(retry.message)}", highlight=False, soft_wrap=True)

    def on_warning(message: str) -> None:
        stderr.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)

    run = {**run, "on_warning": on_warning}
    if interactive():
        with progress_bar() as (on_start, on_result):
            return synthesize_remote(
                requests, out, server, on_start=on_start, on_result=on_result, on_retry=on_retry, **run
            )
    return synthesize_remote(requests, out, server, on_retry=on_retry, **run)


@contextmanager
def progress_bar():
    """A Rich progress bar with an ETA; yields the (on_start, on_result) callbacks `synthesize` takes."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("[bold]synth"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
        console=stderr,
        transient=True,
    ) as progress:
        task = progress.add_task("", total=None)
        yield (
            lambda total, done: progress.update(task, total=total, completed=done),
            lambda result: progress.update(task, advance=1, description=result.request.id),
        )


def print_summary(summary: SynthSummary, requests: Path) -> None:
    if summary.dry_run:
        title = "moss synth --dry-run: the requests are valid"
        columns = ("requests", "would skip", "frame budget", "max audio s", "seed sources")
        values = (
            str(summary.requests),
            str(summary.resumed),
            str(summary.frame_budget),
            f"{summary.frame_budget / summary.frame_rate:.1f}",
            ", ".join(f"{source} {count}" for source, count in sorted(summary.seed_sources.items())),
        )
    else:
        title = "moss synth"
        reasons = summary.stop_reasons
        columns = ("requests", "resumed", "stop/max/empty", "audio s", "wall s", "RTF")
        values = (
            str(summary.requests),
            str(summary.resumed),
            f"{reasons['stop']}/{reasons['max_frames']}/{reasons['empty']}",
            f"{summary.audio_s:.2f}",
            f"{summary.wall_s:.2f}",
            f"{summary.real_time_factor:.3f}",
        )
    print_table(stdout, columns, [[escape(v) for v in values]], title=title, right=columns)  # paths go below, unwrapped
    say = partial(stdout.print, soft_wrap=True, highlight=False)  # a path is left whole for the terminal
    say(f"requests: {requests}" if summary.dry_run else f"out: {summary.out}")
    if summary.server:
        say(f"server: {summary.server}")
    if summary.manifest:
        say(f"manifest: {summary.manifest}")
    if summary.compile_s is not None:
        say(f"compile: {summary.compile_s:.1f} s of the wall time compiled the frame step")
    if summary.empty:
        stdout.print(f"[yellow]empty:[/] {len(summary.empty)} request(s) produced no audio: {_some(summary.empty)}")
    if summary.orphans:
        stdout.print(
            f"[yellow]not in this manifest:[/] {len(summary.orphans)} audio file(s) from another request "
            f"file (kept): {_some(summary.orphans)}",
            highlight=False,
        )
    if summary.other_formats:
        stdout.print(
            f"[yellow]other format:[/] {len(summary.other_formats)} audio file(s) of these requests in another "
            f"format than this run's (kept): {_some(summary.other_formats)}",
            highlight=False,
        )


def _some(names: list[str], shown: int = 10) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
