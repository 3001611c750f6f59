"""`moss synth`: synthesise a request file into audio files and a manifest."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..report.terminal import print_warning
from . import options as opt
from . import server_options as srv
from .common import progress_bar, ray_event, show_retry, stderr, stdout, user_errors

if TYPE_CHECKING:
    from ..jobs.job import SynthSummary


RequestFile = Annotated[
    Path,
    typer.Argument(
        help="Request file: .jsonl, .csv, .txt (one utterance per line) or .lst (Seed-TTS-eval's meta.lst)."
    ),
]
Out = Annotated[Path, typer.Option("--out", "-o", help="Output directory for audio files and manifest.csv.")]
AudioFormat = Annotated[str, typer.Option("--format", help="Audio file format: wav or flac.")]
DryRun = Annotated[
    bool,
    typer.Option(help="Validate the requests, deploy config and checkpoint configs, print what would run, and stop."),
]
Force = Annotated[bool, typer.Option(help="Regenerate everything, even outputs of an earlier run.")]
Stream = Annotated[
    bool,
    typer.Option(
        help="Decode each request while it is generated, in the deploy's codec "
        "chunks, writing its file progressively (time to first audio and "
        "chunk timings go to the manifest)."
    ),
]
FailOnEmpty = Annotated[
    bool, typer.Option(help="Exit 1 when a request produced no audio (its stop head fired at the first frame).")
]
AsJson = Annotated[bool, typer.Option("--json", help="Print a machine-readable summary on stdout.")]


@opt.with_options(opt.ENGINE_OPTIONS, srv.SERVER_OPTIONS, opt.RAY_OPTIONS)
def synth(
    ctx: typer.Context,
    requests: RequestFile,
    out: Out = Path("out"),
    audio_format: AudioFormat = "wav",
    dry_run: DryRun = False,
    force: Force = False,
    stream: Stream = False,
    fail_on_empty: FailOnEmpty = False,
    as_json: AsJson = False,
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
    from ..jobs.report import empty, render

    if as_json:
        stdout.print_json(json.dumps(summary.as_dict()))
    else:
        render(stdout, summary, requests)
    if fail_on_empty and summary.empty and not summary.dry_run:
        stderr.print(f"[bold red]error:[/] {empty(summary)}", soft_wrap=True)
        raise typer.Exit(1)


def _locally(requests: Path, out: Path, run: dict, stream: bool, cluster, options) -> SynthSummary:
    """This process validates and writes; the engine runs here, or on Ray workers with --ray."""
    from ..jobs.local import synthesize

    if cluster is not None:
        from ..jobs.ray import synthesize_on_ray

        synthesize = partial(synthesize_on_ray, cluster, on_event=ray_event)
    with progress_bar("synth") as bar:
        return synthesize(requests, out, options, stream=stream, **_progress(bar), **run)


def _through_server(requests: Path, out: Path, server, run: dict) -> SynthSummary:
    from ..jobs.server import synthesize_remote

    with progress_bar("synth") as bar:
        return synthesize_remote(
            requests,
            out,
            server,
            on_retry=show_retry,
            on_warning=partial(print_warning, stderr),
            **_progress(bar),
            **run,
        )


def _progress(bar) -> dict:
    """The bar as `synthesize`'s callbacks: the requests to do, and each one done."""
    return dict(on_start=bar.start, on_result=lambda result: bar.advance(result.request.id))
