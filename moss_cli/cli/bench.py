"""`moss bench`: engine and codec speed per numerics mode and batch size, with the hardware floor; with
`--server URL`, a live speech server's speed per concurrency and arm, every response checked under load."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import MossError
from ..measures import AUDIO_LEVELS
from ..remote import paths
from ..report.terminal import print_warning
from . import numbers
from . import options as opt
from . import server_options as srv
from .common import Device, DType, command_line, progress_bar, show_retry, stderr, stdout, user_errors
from .options import (
    AllowForeignDeploy,
    CodecOption,
    CompileOption,
    DeviceOption,
    GraphsOption,
    ModelOption,
    ThreadsOption,
)

RandomWeights = Annotated[
    Optional[str],
    typer.Option(
        "--random-weights", help="Random weights at a preset's shapes instead of a checkpoint: tiny, 35m or v1.5."
    ),
]
Batches = Annotated[str, typer.Option("--batch", help="Batch sizes, comma-separated.")]
Modes = Annotated[
    str,
    typer.Option(
        "--modes",
        help="Numerics modes: invariant (the layout this machine allows), blocks (fixed blocks of the batch's "
        "rows, forced: the fallback's cost here), blocks:R (fixed blocks of R rows), fast.",
    ),
]
BenchDType = Annotated[
    DType,
    typer.Option(
        "--dtype",
        help="Model dtype (auto: bfloat16 for --random-weights v1.5, as its checkpoint; else float32 on CPU, "
        "bfloat16 elsewhere).",
    ),
]
NoPack = Annotated[
    bool, typer.Option("--no-pack", help="Keep CPU weights plain (the plain kernel) instead of packed for oneDNN.")
]
# The local engine's bench.
LOCAL_OPTIONS = (
    opt.option("model", ModelOption, None),
    opt.option("codec", CodecOption, None),
    opt.option("random_weights", RandomWeights, None),
    opt.option("batch", Batches, "1,8"),
    opt.option("modes", Modes, "invariant,blocks,fast"),
    opt.option("device", DeviceOption, Device.auto),
    opt.option("dtype", BenchDType, DType.auto),
    opt.option("threads", ThreadsOption, None),
    opt.option("compile", CompileOption, False),
    opt.option("graphs", GraphsOption, False),
    opt.option("no_pack", NoPack, False),
)

Frames = Annotated[
    Optional[int],
    typer.Option(
        "--frames",
        callback=numbers.FRAMES,
        help="Frames per request (default 32); with --server, every request's max_new_tokens (default: "
        "the requests' own).",
    ),
]
Arms = Annotated[
    Optional[str],
    typer.Option(
        "--arms",
        help="Arms, comma-separated: unseeded (no seed), seeded (every request an explicit seed), deploy-seed "
        "(every request the --deploy file's stage-0 seed). Default: unseeded,seeded with --server, else seeded.",
    ),
]
Repeats = Annotated[
    int,
    typer.Option(
        "--repeats",
        callback=numbers.REPEATS,
        help="Runs per figure (the median is reported); with --server, rounds per level.",
    ),
]
BenchDeploy = Annotated[
    Optional[Path],
    typer.Option(
        "--deploy",
        help="The deploy file (with --server: the one the server runs): its stage-0 seed is the deploy-seed arm's, "
        "which unseeded requests must get.",
    ),
]
JsonPath = Annotated[Optional[Path], typer.Option("--json", help="Write the figures as JSON.")]
# Both halves': the local engine's and the server's.
BENCH_OPTIONS = (
    opt.option("frames", Frames, None),
    opt.option("arms", Arms, None),
    opt.option("repeats", Repeats, 3),
    opt.option("deploy", BenchDeploy, None),
    opt.option("allow_foreign_deploy", AllowForeignDeploy, False),
)

Levels = Annotated[str, typer.Option("--concurrency", help="--server: concurrency levels to sweep, comma-separated.")]
NumRequests = Annotated[
    Optional[int],
    typer.Option(
        "--num-requests",
        callback=numbers.REQUESTS,
        help="--server: requests per arm, level and round (default: twice the level, at least the request set).",
    ),
]
Duration = Annotated[
    Optional[float],
    typer.Option(
        "--duration",
        callback=numbers.SECONDS,
        help="--server: instead of a count, seconds of sending per arm, level and round.",
    ),
]
RequestRate = Annotated[
    float,
    typer.Option(
        "--request-rate",
        callback=numbers.REQUEST_RATE,
        help="--server: Poisson arrivals, requests per second (inf: back to back, closed loop).",
    ),
]
Warmup = Annotated[
    int,
    typer.Option(
        "--warmup", callback=numbers.WARMUP, help="--server: requests sent first, neither measured nor checked."
    ),
]
Level = Annotated[
    str,
    typer.Option(
        "--level",
        metavar="|".join(AUDIO_LEVELS),
        help="--server: how a response must match its request sent alone: bitwise | waveform (SNR) | speech "
        "(the same speech: identical, or within the --speech-* thresholds; other speech fails).",
    ),
]
MinSnrDb = Annotated[
    float,
    typer.Option("--min-snr-db", callback=numbers.SNR_DB, help="--server --level waveform: minimum SNR against it."),
]
Streamed = Annotated[
    bool,
    typer.Option(
        "--stream/--no-stream",
        help="--server: ask for raw audio chunks (stream_format audio), as vllm bench serve does: time to first "
        "audio packet and continuity; or whole bodies.",
    ),
]
ServingPathName = Annotated[
    Optional[str],
    typer.Option(
        "--path",
        metavar="|".join(paths.benched()),
        help="--server: the serving path every request goes along: "
        + "; ".join(f"{name} ({path.route})" for name, path in paths.benched().items())
        + f". --stream asks for {paths.RAW_STREAM.name}, --no-stream for {paths.SINGLE.name}.",
    ),
]
Requests = Annotated[
    Optional[Path], typer.Option("--requests", help="--server: a request file (default: the audit's built-in set).")
]
ReportDir = Annotated[
    Optional[Path],
    typer.Option(
        "--report-dir", help="--server: a folder with the JSON, the HTML page, its plots and the audio that varied."
    ),
]
AllowUnseeded = Annotated[
    bool,
    typer.Option(
        "--allow-unseeded",
        help="--server: unseeded responses that differ from their request alone are reported, not a failure, "
        "where the deploy seed is unknown (no --deploy, and the server does not report applying one).",
    ),
]
# The server's bench; the client's options (--timeout, --response-format, ...) are server_options.py's.
SERVER_BENCH_OPTIONS = (
    opt.option("concurrency", Levels, "1,8"),
    opt.option("num_requests", NumRequests, None),
    opt.option("duration", Duration, None),
    opt.option("request_rate", RequestRate, float("inf")),
    opt.option("warmup", Warmup, 2),
    opt.option("level", Level, "bitwise"),
    opt.option("min_snr_db", MinSnrDb, 60.0),
    opt.option("streamed", Streamed, True),
    opt.option("path", ServingPathName, None),
    opt.option("requests", Requests, None),
    opt.option("allow_unseeded", AllowUnseeded, False),
)

# Options of one half given to the other: those that server_options.py's checks do not name already.
LOCAL_BENCH = tuple(p.name for p in LOCAL_OPTIONS if p.name not in srv.LOCAL_ONLY)
SERVER_BENCH = (
    *(p.name for p in (*SERVER_BENCH_OPTIONS, *opt.SPEECH_OPTIONS) if p.name not in srv.SERVER_ONLY),
    "report_dir",
)


@opt.with_options(LOCAL_OPTIONS, BENCH_OPTIONS, SERVER_BENCH_OPTIONS, srv.CLIENT_OPTIONS, opt.SPEECH_OPTIONS)
def bench(
    ctx: typer.Context,
    server: srv.ServerOption = None,
    json_path: JsonPath = None,
    report_dir: ReportDir = None,
) -> None:
    """Talker frames/s, prefill tokens/s, codec real-time factor, time to first audio, peak memory and
    efficiency against the hardware floor, per mode and batch; the invariant/fast ratio per batch.
    With --server URL: a concurrency sweep of a running speech server with vllm bench serve's figures
    per arm (unseeded, seeded, deploy-seed), each arm's cost over the unseeded arm's, and every response
    compared with its request sent alone: exit 1 where one that must hold differs (or fails)."""
    if server:
        _on_server(ctx, json_path, report_dir)
    else:
        _here(ctx, json_path)


def _here(ctx: typer.Context, json_path: Path | None) -> None:
    with user_errors():
        from ..bench import run_bench
        from ..bench.local_report import measured, render, write_json

        srv.refuse_server_options(ctx)
        _only(ctx, SERVER_BENCH, "with --server (a running speech server)")
        report = run_bench(
            local_bench_options(ctx.params), progress=lambda row: stderr.print(measured(row), highlight=False)
        )
        write_json(report, json_path)
    render(stdout, report)


def _on_server(ctx: typer.Context, json_path: Path | None, report_dir: Path | None) -> None:
    with user_errors():
        from ..bench.report import check_outputs, render, write_reports
        from ..bench.server import ServerBench

        srv.refuse_local_options(ctx, allowed=("deploy", "allow_foreign_deploy", *opt.asr_device(ctx.params)))
        _only(ctx, LOCAL_BENCH, "for the local engine, not with --server")
        check_outputs(json_path, report_dir)
        if ctx.params["path"] is not None and ctx.get_parameter_source("streamed").name == "COMMANDLINE":
            raise MossError("give --path or --stream/--no-stream, not both", field="--path")
        bench = ServerBench(server_bench_options(ctx.params), on_retry=show_retry)
        for warning in bench.known.dropped:
            print_warning(stderr, warning)
        with progress_bar("bench", bench.total) as bar:
            report = bench.run(on_phase=bar.phase, on_sent=lambda label: bar.advance())
        write_reports(report, json_path, report_dir, command_line(ctx))
    render(stdout, report)
    if report_dir is not None:
        stdout.print(f"report: {report_dir / 'index.html'}", highlight=False, soft_wrap=True)
    raise typer.Exit(report.exit_code)


def _only(ctx: typer.Context, names: tuple[str, ...], where: str) -> None:
    """Options given on the command line that mean nothing here are an error, not silently ignored."""
    given = [
        p for p in ctx.command.params if p.name in names and ctx.get_parameter_source(p.name).name == "COMMANDLINE"
    ]
    if given:
        named = ", ".join(p.opts[0] for p in given)
        raise MossError(f"{named}: only {where}", field=given[0].opts[0])


def local_bench_options(given: dict):
    """The local engine's `BenchOptions` from the command's values (imports torch)."""
    from ..bench import BenchOptions
    from ..bench.arms import parse_arms

    return BenchOptions(
        model=given["model"],
        codec=given["codec"],
        random_weights=given["random_weights"],
        batches=numbers.integers(given["batch"], "--batch", numbers.BATCH),
        frames=given["frames"] if given["frames"] is not None else BenchOptions.frames,
        modes=tuple(m.strip() for m in given["modes"].split(",") if m.strip()),
        arms=parse_arms(given["arms"]) if given["arms"] is not None else BenchOptions.arms,
        deploy=given["deploy"],
        allow_foreign_deploy=given["allow_foreign_deploy"],
        device=given["device"].value,
        dtype=given["dtype"].value,
        repeats=given["repeats"],
        threads=given["threads"],
        compile=given["compile"],
        graphs=given["graphs"],
        pack=not given["no_pack"],
    )


def server_bench_options(given: dict):
    """The server bench's `ServerBenchOptions` from the command's values: one field per option."""
    from ..bench.arms import parse_arms
    from ..bench.server import ServerBenchOptions

    levels = numbers.integers(given["concurrency"], "--concurrency", numbers.BATCH)
    return ServerBenchOptions(
        server=srv.server_settings(given, concurrency=max(levels)),
        concurrency=levels,
        arms=parse_arms(given["arms"]) if given["arms"] is not None else ServerBenchOptions.arms,
        num_requests=given["num_requests"],
        duration_s=given["duration"],
        request_rate=given["request_rate"],
        warmup=given["warmup"],
        repeats=given["repeats"],
        deploy=given["deploy"],
        allow_foreign_deploy=given["allow_foreign_deploy"],
        level=given["level"],
        min_snr_db=given["min_snr_db"],
        speech=opt.speech_thresholds(given),
        words=opt.word_options(given),
        path=given["path"] or (paths.RAW_STREAM if given["streamed"] else paths.SINGLE).name,
        frames=given["frames"],
        requests=given["requests"],
        allow_dropped_fields=given["allow_dropped_fields"],
        allow_unseeded=given["allow_unseeded"],
    )
