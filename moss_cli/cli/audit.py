"""`moss audit-determinism`: prove (or disprove) that each request's output ignores its batch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..audit.scenarios import SCENARIOS, server_scenarios
from ..errors import MossError
from ..interrupts import interrupts_as_exceptions
from ..measures import LEVELS
from . import numbers
from . import options as opt
from . import server_options as srv
from .common import command_line, ray_event, show_retry, stderr, stdout, user_errors

Requests = Annotated[Optional[Path], typer.Argument(help="Request file (default: the built-in audit set).")]
Scenarios = Annotated[
    Optional[str],
    typer.Option(
        help=f"Comma-separated names (e.g. repeat,shuffled), from: {', '.join(SCENARIOS)} (default: all); with "
        f"--server, from: {', '.join(server_scenarios())} (default: all; a path the server does not serve is then "
        "skipped, and named here it is an error)."
    ),
]
Level = Annotated[
    str,
    typer.Option(
        metavar="|".join(LEVELS),
        help="What counts as a violation in a composition: codes | waveform | speech | bitwise (speech: a "
        "response that is not the same speech as alone; the same speech with other bits is a warning). "
        "Comparisons alone are bitwise at every level.",
    ),
]
MinSnrDb = Annotated[
    float, typer.Option(callback=numbers.SNR_DB, help="Waveform level: minimum SNR against the reference.")
]
StrictUnseeded = Annotated[bool, typer.Option(help="Fail on differences of unseeded requests too.")]
AllowUnseeded = Annotated[
    bool,
    typer.Option(
        help="Accept unseeded requests whose two runs alone differ (no deploy seed, or a server without the "
        "deploy-seed fix): reported as unseeded, not a failure."
    ),
]
ReportDir = Annotated[
    Optional[Path],
    typer.Option(help="Write every report, the audio of diverging pairs and an HTML page with plots (index.html)."),
]
Junit = Annotated[Optional[Path], typer.Option(help="JUnit XML (xunit2) report.")]
JsonPath = Annotated[Optional[Path], typer.Option("--json", help="JSON report with every comparison.")]
Markdown = Annotated[
    Optional[Path], typer.Option(help="Markdown summary (also appended to $GITHUB_STEP_SUMMARY when set).")
]
SaveGolden = Annotated[Optional[Path], typer.Option("--save-golden", help="Save a golden baseline.")]
Golden = Annotated[Optional[Path], typer.Option(help="Compare against a golden baseline; drift fails.")]
StaggerMs = Annotated[
    Optional[float],
    typer.Option(
        "--stagger-ms",
        callback=numbers.STAGGER_MS,
        help="--server, scenario staggered: milliseconds between sends (default: a quarter of the time a "
        "request takes alone, so that they overlap).",
    ),
]


@opt.with_options(opt.ENGINE_OPTIONS, srv.SERVER_OPTIONS, opt.RAY_OPTIONS, opt.SPEECH_OPTIONS)
def audit_determinism(
    ctx: typer.Context,
    requests: Requests = None,
    scenarios: Scenarios = None,
    level: Level = "codes",
    min_snr_db: MinSnrDb = 60.0,
    strict_unseeded: StrictUnseeded = False,
    allow_unseeded: AllowUnseeded = False,
    report_dir: ReportDir = None,
    junit: Junit = None,
    json_path: JsonPath = None,
    markdown: Markdown = None,
    save_golden_path: SaveGolden = None,
    golden: Golden = None,
    stagger_ms: StaggerMs = None,
) -> None:
    """Synthesise the same requests in many batch compositions and compare each with its output alone.

    With --server, audit a running speech server instead (a black box: its audio, and moss serve's
    headers when it sends them); --deploy then names the deploy file the server runs, whose stage-0
    seed unseeded requests must get (the deploy-seed fix). Exit 0: no violation; 1: a violation (or
    golden drift); 2: bad input or runtime error (including a server that does not answer with audio)."""
    # A signal stops the audit through its reports: what was compared before is written, marked incomplete.
    with user_errors(), interrupts_as_exceptions():
        # torch loads here, not for --help
        from ..audit.golden import check_golden, save_golden
        from ..audit.report import REPORT_DIR_FILES, conclude, write_reports
        from ..report.files import check_output_paths

        # Before any model loads: a bad output path must not cost a whole audit.
        check_output_paths(
            {"--json": json_path, "--junit": junit, "--markdown": markdown, "--save-golden": save_golden_path},
            report_dir,
            REPORT_DIR_FILES,
        )
        chosen = tuple(s.strip() for s in scenarios.split(",") if s.strip()) if scenarios is not None else None
        if chosen == ():
            raise MossError("no scenario selected", field="--scenarios")
        if golden is not None and not golden.is_file():
            problem = "is a directory, expected a golden file" if golden.is_dir() else "golden file does not exist"
            raise MossError(problem, file=golden, field="--golden")
        audit = dict(requests=requests, scenarios=chosen, level=level, min_snr_db=min_snr_db)
        audit.update(speech=opt.speech_thresholds(ctx.params), words=opt.word_options(ctx.params))
        audit.update(strict_unseeded=strict_unseeded, allow_unseeded=allow_unseeded, command=command_line(ctx))
        result = _audit(ctx, audit, stagger_ms)
        complete = result.stopped is None  # a partial audit is no baseline and has no drift to show
        check = check_golden(golden, result) if golden is not None and complete else None
        written = write_reports(
            result, check, json_path=json_path, junit_path=junit, markdown_path=markdown, report_dir=report_dir
        )
        if save_golden_path is not None and complete:
            save_golden(save_golden_path, result)
    saved = save_golden_path if save_golden_path is not None and complete else None
    raise typer.Exit(conclude(stdout, stderr, result, check, written, report_dir, saved, golden is not None))


def _audit(ctx: typer.Context, audit: dict, stagger_ms: float | None):
    """The audit the command asks for, with `audit`'s fields: against --server, else on this machine's engine,
    or on Ray workers with --ray."""
    from ..audit.runner import AuditOptions, run_audit
    from ..pipeline import SynthOptions

    given = ctx.params
    if given["server"]:
        srv.refuse_local_options(ctx, allowed=("deploy", "allow_foreign_deploy", *opt.asr_device(ctx.params)))
        return run_audit(
            AuditOptions(
                **audit,
                # The deploy file the server runs: its stage-0 seed is checked.
                synth=SynthOptions(deploy=given["deploy"], allow_foreign_deploy=given["allow_foreign_deploy"]),
                server=srv.server_settings(given),
                stagger_s=None if stagger_ms is None else stagger_ms / 1000.0,
                allow_dropped_fields=given["allow_dropped_fields"],
                on_retry=show_retry,
            )
        )
    srv.refuse_server_options(ctx)
    # Its layout is fixed at the audited --max-batch.
    options = AuditOptions(**audit, max_batch=given["max_batch"], synth=opt.synth_options(given))
    cluster = opt.ray_cluster(given)
    if cluster is not None:  # the same audit, its runs on Ray workers
        from ..audit.ray_executor import audit_on_ray

        return audit_on_ray(cluster, options, on_event=ray_event)
    return run_audit(options)
