"""`moss bench`: engine and codec speed per numerics mode and batch size, with the hardware floor; with
`--server URL`, a live speech server's speed per concurrency and arm, every response checked under load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..errors import MossError
from ..report.terminal import print_table
from . import numbers
from . import options as opt
from . import server_options as srv
from .common import Device, DType, command_line, interactive, stderr, stdout, user_errors
from .options import AllowForeignDeploy, CodecOption, CompileOption, DeviceOption, ModelOption, ThreadsOption

COLUMNS = (  # the terminal's short headers; the JSON has every figure with its full name
    ("mode", "mode"),
    ("arm", "arm"),
    ("batch", "batch"),
    ("layout", "layout"),
    ("frames/s", "talker_frames_per_s"),
    ("eff.", "efficiency"),
    ("tok/s", "prefill_tokens_per_s"),
    ("RTF", "codec_rtf"),
    ("TTFA s", "ttfa_s"),
    ("MB", "peak_memory_mb"),
)
LEGEND = (
    "frames/s: talker decode; eff.: hardware floor / engine step; tok/s: prefill; RTF: codec seconds per "
    "audio second; TTFA: time to first audio, streaming; MB: peak memory (medians; the JSON has the spread)"
)
# Options of the local engine's bench, and of the server's, beyond the shared ones (server_options.py).
LOCAL_BENCH = ("random_weights", "batch", "modes", "no_pack")
SERVER_BENCH = ("num_requests", "duration", "request_rate", "warmup", "level", "min_snr_db", "streamed", "requests")
SERVER_BENCH += ("report_dir", "allow_unseeded", *(p.name for p in opt.SPEECH_OPTIONS))


def _only(ctx: typer.Context, names: tuple[str, ...], where: str) -> None:
    """Options given on the command line that mean nothing here are an error, not silently ignored."""
    given = [
        p for p in ctx.command.params if p.name in names and ctx.get_parameter_source(p.name).name == "COMMANDLINE"
    ]
    if given:
        named = ", ".join(p.opts[0] for p in given)
        raise MossError(f"{named}: only {where}", field=given[0].opts[0])


@opt.with_options(opt.SPEECH_OPTIONS)
def bench(
    ctx: typer.Context,
    model: ModelOption = None,
    codec: CodecOption = None,
    random_weights: Annotated[
        Optional[str],
        typer.Option(help="Random weights at a preset's shapes instead of a checkpoint: tiny, 35m or v1.5."),
    ] = None,
    batch: Annotated[str, typer.Option(help="Batch sizes, comma-separated.")] = "1,8",
    frames: Annotated[
        Optional[int],
        typer.Option(
            callback=numbers.FRAMES,
            help="Frames per request (default 32); with --server, every request's max_new_tokens (default: "
            "the requests' own).",
        ),
    ] = None,
    modes: Annotated[
        str,
        typer.Option(
            help="Numerics modes: invariant (the layout this machine allows), blocks (fixed blocks of the batch's "
            "rows, forced: the fallback's cost here), blocks:R (fixed blocks of R rows), fast."
        ),
    ] = "invariant,blocks,fast",
    arms: Annotated[
        Optional[str],
        typer.Option(
            help="Arms, comma-separated: unseeded (no seed), seeded (every request an explicit seed), deploy-seed "
            "(every request the --deploy file's stage-0 seed). Default: unseeded,seeded with --server, else seeded."
        ),
    ] = None,
    repeats: Annotated[
        int,
        typer.Option(
            callback=numbers.REPEATS,
            help="Runs per figure (the median is reported); with --server, rounds per level.",
        ),
    ] = 3,
    device: DeviceOption = Device.auto,
    dtype: Annotated[
        DType,
        typer.Option(
            help="Model dtype (auto: bfloat16 for --random-weights v1.5, as its checkpoint; else float32 on CPU, "
            "bfloat16 elsewhere)."
        ),
    ] = DType.auto,
    threads: ThreadsOption = None,
    compile: CompileOption = False,
    no_pack: Annotated[
        bool, typer.Option("--no-pack", help="Keep CPU weights plain (the plain kernel) instead of packed for oneDNN.")
    ] = False,
    deploy: Annotated[
        Optional[Path],
        typer.Option(
            "--deploy",
            help="The deploy file (with --server: the one the server runs): its stage-0 seed is the deploy-seed arm's, "
            "which unseeded requests must get.",
        ),
    ] = None,
    allow_foreign_deploy: AllowForeignDeploy = False,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the figures as JSON.")] = None,
    server: srv.ServerOption = None,
    concurrency: Annotated[
        str, typer.Option("--concurrency", help="--server: concurrency levels to sweep, comma-separated.")
    ] = "1,8",
    num_requests: Annotated[
        Optional[int],
        typer.Option(
            "--num-requests",
            callback=numbers.REQUESTS,
            help="--server: requests per arm, level and round (default: twice the level, at least the request set).",
        ),
    ] = None,
    duration: Annotated[
        Optional[float],
        typer.Option(
            "--duration",
            callback=numbers.SECONDS,
            help="--server: instead of a count, seconds of sending per arm, level and round.",
        ),
    ] = None,
    request_rate: Annotated[
        float,
        typer.Option(
            "--request-rate",
            callback=numbers.REQUEST_RATE,
            help="--server: Poisson arrivals, requests per second (inf: back to back, closed loop).",
        ),
    ] = float("inf"),
    warmup: Annotated[
        int,
        typer.Option(
            "--warmup", callback=numbers.WARMUP, help="--server: requests sent first, neither measured nor checked."
        ),
    ] = 2,
    level: Annotated[
        str,
        typer.Option(
            help="--server: how a response must match its request sent alone: bitwise | waveform (SNR) | speech "
            "(the same speech: identical, or within the --speech-* thresholds; other speech fails)."
        ),
    ] = "bitwise",
    min_snr_db: Annotated[
        float, typer.Option(callback=numbers.SNR_DB, help="--server --level waveform: minimum SNR against it.")
    ] = 60.0,
    streamed: Annotated[
        bool,
        typer.Option(
            "--stream/--no-stream",
            help="--server: ask for raw audio chunks (stream_format audio), as vllm bench serve does: time to first "
            "audio packet and continuity; or whole bodies.",
        ),
    ] = True,
    requests: Annotated[
        Optional[Path],
        typer.Option("--requests", help="--server: a request file (default: the audit's built-in set)."),
    ] = None,
    report_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--report-dir", help="--server: a folder with the JSON, the HTML page, its plots and the audio that varied."
        ),
    ] = None,
    allow_unseeded: Annotated[
        bool,
        typer.Option(
            "--allow-unseeded",
            help="--server: unseeded responses that differ from their request alone are reported, not a failure, "
            "where the deploy seed is unknown (no --deploy, and the server does not report applying one).",
        ),
    ] = False,
    timeout: srv.TimeoutOption = 300.0,
    retries: srv.RetriesOption = 0,
    header: srv.HeaderOption = None,
    api_key: srv.ApiKeyOption = None,
    served_model: srv.ServedModelOption = None,
    response_format: srv.ResponseFormatOption = "pcm",
    sample_rate: srv.SampleRateOption = None,
    channels: srv.ChannelsOption = None,
    allow_dropped_fields: srv.AllowDroppedFieldsOption = False,
) -> None:
    """Talker frames/s, prefill tokens/s, codec real-time factor, time to first audio, peak memory and
    efficiency against the hardware floor, per mode and batch; the invariant/fast ratio per batch.
    With --server URL: a concurrency sweep of a running speech server with vllm bench serve's figures
    per arm (unseeded, seeded, deploy-seed), each arm's cost over the unseeded arm's, and every response
    compared with its request sent alone: exit 1 where one that must hold differs (or fails)."""
    if server:
        _server_bench(ctx, server, frames, arms, repeats, deploy, allow_foreign_deploy, json_path, report_dir)
        return
    with user_errors():
        from ..bench import BenchOptions, run_bench
        from ..bench.arms import parse_arms

        srv.refuse_server_options(ctx)
        _only(ctx, SERVER_BENCH, "with --server (a running speech server)")
        if (model is None) != (codec is None):
            raise MossError("--model and --codec go together", field="--codec")
        if model is not None and random_weights is not None:
            raise MossError("use either --model/--codec or --random-weights", field="--random-weights")
        options = BenchOptions(
            model=model,
            codec=codec,
            random_weights=random_weights,
            batches=numbers.integers(batch, "--batch", numbers.BATCH),
            frames=frames if frames is not None else 32,
            modes=tuple(m.strip() for m in modes.split(",") if m.strip()),
            arms=parse_arms(arms) if arms is not None else ("seeded",),
            deploy=deploy,
            allow_foreign_deploy=allow_foreign_deploy,
            device=device.value,
            dtype=dtype.value,
            repeats=repeats,
            threads=threads,
            compile=compile,
            pack=not no_pack,
        )
        report = run_bench(
            options,
            progress=lambda row: stderr.print(
                f"{row.mode} {row.arm} x{row.batch}: {row.talker_frames_per_s} frames/s", highlight=False
            ),
        )
        if json_path is not None:
            from ..io.atomic import write_text_atomic

            write_text_atomic(json_path, json.dumps(report.as_dict(), indent=2) + "\n")
    _print_local(report)


def _server_bench(ctx, server, frames, arms, repeats, deploy, allow_foreign_deploy, json_path, report_dir) -> None:
    p = ctx.params
    with user_errors():
        from ..bench.arms import parse_arms
        from ..bench.report import check_outputs, write_reports
        from ..bench.server import ServerBench, ServerBenchOptions

        srv.refuse_local_options(ctx, allowed=("deploy", "allow_foreign_deploy"))
        _only(ctx, LOCAL_BENCH, "for the local engine, not with --server")
        check_outputs(json_path, report_dir)
        levels = numbers.integers(p["concurrency"], "--concurrency", numbers.BATCH)
        settings = srv.server_options(
            server=server,
            concurrency=max(levels),
            timeout=p["timeout"],
            retries=p["retries"],
            header=p["header"],
            response_format=p["response_format"],
            sample_rate=p["sample_rate"],
            channels=p["channels"],
            served_model=p["served_model"],
            api_key=p["api_key"],
        )
        options = ServerBenchOptions(
            server=settings,
            concurrency=levels,
            arms=parse_arms(arms if arms is not None else "unseeded,seeded"),
            num_requests=p["num_requests"],
            duration_s=p["duration"],
            request_rate=p["request_rate"],
            warmup=p["warmup"],
            repeats=repeats,
            deploy=deploy,
            allow_foreign_deploy=allow_foreign_deploy,
            level=p["level"],
            min_snr_db=p["min_snr_db"],
            speech=opt.speech_thresholds(p),
            path="raw-stream" if p["streamed"] else "single",
            frames=frames,
            requests=p["requests"],
            allow_dropped_fields=p["allow_dropped_fields"],
            allow_unseeded=p["allow_unseeded"],
        )
        bench = ServerBench(options, on_retry=lambda r: stderr.print(f"[yellow]retry:[/] {escape(r.message)}"))
        for warning in bench.known.dropped:
            stderr.print(f"[bold yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
        with _progress(bench.total) as (on_phase, on_sent):
            report = bench.run(on_phase, on_sent)
        write_reports(report, json_path, report_dir, command_line(ctx))
    from ..bench.report import LEGEND as SERVER_LEGEND
    from ..bench.report import table, verdict

    s = report.setup
    headers, rows = table(report)
    title = (
        f"moss bench --server {escape(s['server'])}: {s['arrivals']}, {s['rounds']} round(s), {s['response_format']} "
        f"{'streamed' if options.serving_path.streamed else 'bodies'}, level {s['level']}"
    )
    print_table(stdout, headers, [[escape(c) for c in row] for row in rows], title=title, right=set(headers) - {"arm"})
    stdout.print(SERVER_LEGEND, style="dim", highlight=False, markup=False)
    for line in verdict(report):
        stdout.print(line, highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(report.exit_code)


def _progress(total: int | None):
    """A Rich progress bar over the sweep's requests for a person at a terminal; else one line per phase."""
    from contextlib import contextmanager

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    @contextmanager
    def bar():
        if not interactive():
            yield (lambda text: stderr.print(f"bench: {escape(text)}", highlight=False), lambda label: None)
            return
        columns = (TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, TextColumn("{task.description}"), console=stderr, transient=True) as progress:
            task = progress.add_task("", total=total)
            yield (
                lambda text: progress.update(task, description=escape(text)),
                lambda label: progress.update(task, advance=1),
            )

    return bar()


def _print_local(report) -> None:
    setup = report.setup
    title = (
        f"moss bench: {escape(setup['model'])}, {setup['device']} {setup['dtype']}, "
        f"{setup['threads']} thread{'s' if setup['threads'] != 1 else ''}, {setup['frames']} frames, "
        f"{setup['linear_kernel']} linear kernel"
    )
    headers = [header for header, _ in COLUMNS]
    rows = [[escape(str(getattr(row, key))) for _, key in COLUMNS] for row in report.rows]
    print_table(stdout, headers, rows, title=title, right=set(headers) - {"mode", "arm"})
    stdout.print(LEGEND, style="dim", highlight=False)
    for mode, ratios in report.ratios.items():
        for size, ratio in ratios.items():
            low, high = report.ratio_ranges[mode][size]
            stdout.print(
                f"batch {size}: {mode} / fast step time {ratio} [{low}-{high}] (the modes alternate)",
                highlight=False,
                markup=False,
            )
    for arm, by_mode in report.arm_ratios.items():
        for mode, ratios in by_mode.items():
            for size, ratio in ratios.items():
                low, high = report.arm_ratio_ranges[arm][mode][size]
                stdout.print(
                    f"batch {size}: {mode} {arm} / unseeded step time {ratio} [{low}-{high}] (the arms alternate)",
                    highlight=False,
                    markup=False,
                )
    bounds = {}  # the bound hardly depends on the mode: one line per batch, its first mode's
    for row in report.rows:
        bounds.setdefault(row.batch, row)
    for batch, row in bounds.items():
        stdout.print(
            f"batch {batch}: reading the KV cache once takes {row.kv_read_ms} ms per step, so no engine could reach "
            f"an efficiency above {row.efficiency_bound} here",
            highlight=False,
            markup=False,
        )
    for row in report.rows:
        if row.compile_s:
            stdout.print(f"{row.mode} x{row.batch}: compiled the frame step in {row.compile_s} s", highlight=False)
