"""`moss diff A B`: did this upgrade, this other machine or these settings change my audio?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..measures import AUDIO_LEVELS, check_level, check_speech
from . import numbers
from . import options as opt
from .common import command_line, stderr, stdout, user_errors

SIDE = "An output directory of `moss synth` (manifest.csv + audio) or a golden file (--save-golden)."


SideA = Annotated[Path, typer.Argument(metavar="A", help=f"Side A. {SIDE}", show_default=False)]
SideB = Annotated[Path, typer.Argument(metavar="B", help=f"Side B. {SIDE}", show_default=False)]
Level = Annotated[
    str,
    typer.Option(
        metavar="|".join(AUDIO_LEVELS),
        help="bitwise: identical PCM; waveform: codes not known to differ and SNR >= --min-snr-db; speech: "
        "identical PCM, or the same speech (the --speech-* thresholds).",
    ),
]
MinSnrDb = Annotated[
    float, typer.Option(callback=numbers.SNR_DB, help="Waveform level: the lowest SNR that still passes.")
]
ReportDir = Annotated[
    Optional[Path],
    typer.Option(help="Write every report, the clips of each differing id and an HTML page with plots."),
]
Junit = Annotated[Optional[Path], typer.Option(help="JUnit XML report (one testcase per id).")]
JsonPath = Annotated[Optional[Path], typer.Option("--json", help="JSON report with every id.")]
Markdown = Annotated[Optional[Path], typer.Option(help="Markdown summary.")]
AllowUnseeded = Annotated[
    bool,
    typer.Option(help="An id without a seed on either side that differs is reported unseeded, not a failure."),
]


@opt.with_options(opt.SPEECH_OPTIONS)
def diff(
    ctx: typer.Context,
    a: SideA,
    b: SideB,
    level: Level = "bitwise",
    min_snr_db: MinSnrDb = 60.0,
    report_dir: ReportDir = None,
    junit: Junit = None,
    json_path: JsonPath = None,
    markdown: Markdown = None,
    allow_unseeded: AllowUnseeded = False,
) -> None:
    """Compare two runs id by id: codes and PCM hashes, duration, SNR, LSD, max abs; ids on one side
    only; a differing seed or setting named as the likely cause.

    Exit 0: identical (or within --min-snr-db at --level waveform, the same speech at --level speech);
    1: they differ; 2: bad input."""
    with user_errors():
        from ..diff.compare import diff_runs
        from ..diff.report import REPORT_DIR_FILES, render, write_reports
        from ..diff.sides import load_side
        from ..measures.judgement import Tolerances
        from ..report.files import check_output_paths

        words = opt.word_options(ctx.params)
        check_speech(check_level(level, AUDIO_LEVELS), words)
        files = {"--json": json_path, "--junit": junit, "--markdown": markdown}
        check_output_paths(files, report_dir, REPORT_DIR_FILES)
        sides = [load_side(a, "A"), load_side(b, "B")]
        tolerances = Tolerances(min_snr_db, opt.speech_thresholds(ctx.params), words)
        result = diff_runs(*sides, level=level, min_snr_db=min_snr_db, allow_unseeded=allow_unseeded,
                           tolerances=tolerances)  # fmt: skip
        write_reports(
            result,
            command=command_line(ctx),
            json_path=json_path,
            junit_path=junit,
            markdown_path=markdown,
            report_dir=report_dir,
        )
    render(stdout, result)
    if report_dir is not None:
        stdout.print(f"report: {report_dir / 'index.html'}", highlight=False, soft_wrap=True)
    if not result.passed:
        stderr.print(f"the runs differ ({sum(c.failed for c in result.cases)} id(s))", style="red")
    raise typer.Exit(0 if result.passed else 1)
