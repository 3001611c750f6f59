"""`moss audit-determinism`: prove (or disprove) that each request's output ignores its batch."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..audit.scenarios import SCENARIOS
from ..errors import MossError
from .common import Device, DType, ray_event, stderr, stdout, user_errors
from .options import (
    AllowForeignDeploy,
    BatchInvariant,
    CodecOption,
    CpusPerWorkerOption,
    DeployOption,
    DeviceOption,
    DTypeOption,
    GpusPerWorkerOption,
    LegacyGlobalRng,
    MaxBatchOption,
    ModelOption,
    RayAddressOption,
    RayOption,
    ThreadsOption,
    WorkersOption,
    ray_cluster,
    synth_options,
)


def audit_determinism(
    requests: Annotated[Optional[Path], typer.Argument(help="Request file (default: the built-in audit set).")] = None,
    deploy: DeployOption = None,
    allow_foreign_deploy: AllowForeignDeploy = False,
    model: ModelOption = None,
    codec: CodecOption = None,
    scenarios: Annotated[str, typer.Option(help=f"Comma-separated: {','.join(SCENARIOS)}.")] = ",".join(SCENARIOS),
    level: Annotated[str, typer.Option(help="What counts as a violation: codes | waveform | bitwise.")] = "codes",
    min_snr_db: Annotated[float, typer.Option(help="Waveform level: minimum SNR against the reference.")] = 60.0,
    strict_unseeded: Annotated[bool, typer.Option(help="Fail on differences of unseeded requests too.")] = False,
    legacy_global_rng: LegacyGlobalRng = False,
    batch_invariant: BatchInvariant = True,
    max_batch: MaxBatchOption = None,
    threads: ThreadsOption = None,
    device: DeviceOption = Device.auto,
    dtype: DTypeOption = DType.auto,
    report_dir: Annotated[
        Optional[Path], typer.Option(help="Write every report and the audio of diverging pairs.")
    ] = None,
    junit: Annotated[Optional[Path], typer.Option(help="JUnit XML (xunit2) report.")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="JSON report with every comparison.")] = None,
    markdown: Annotated[
        Optional[Path], typer.Option(help="Markdown summary (also appended to $GITHUB_STEP_SUMMARY when set).")
    ] = None,
    save_golden_path: Annotated[Optional[Path], typer.Option("--save-golden", help="Save a golden baseline.")] = None,
    golden: Annotated[Optional[Path], typer.Option(help="Compare against a golden baseline; drift fails.")] = None,
    ray: RayOption = False,
    ray_address: RayAddressOption = None,
    workers: WorkersOption = None,
    gpus_per_worker: GpusPerWorkerOption = None,
    cpus_per_worker: CpusPerWorkerOption = None,
) -> None:
    """Synthesise the same requests in many batch compositions and compare each with its output alone.

    Exit 0: no violation; 1: a violation (or golden drift); 2: bad input or runtime error."""
    with user_errors():
        # torch loads here, not for --help
        from ..audit.golden import check_golden, save_golden
        from ..audit.report import check_output_paths, render, summary, write_reports
        from ..audit.runner import AuditOptions, run_audit

        # Before any model loads: a bad output path must not cost a whole audit.
        check_output_paths(
            {"--json": json_path, "--junit": junit, "--markdown": markdown, "--save-golden": save_golden_path},
            report_dir,
        )
        cluster = ray_cluster(ray, ray_address, workers, gpus_per_worker, cpus_per_worker)
        if cluster is not None:  # the same audit, its runs on Ray workers
            from ..scaleout.audit import audit_on_ray

            run_audit = partial(audit_on_ray, cluster, on_event=ray_event)
        chosen = tuple(s.strip() for s in scenarios.split(",") if s.strip())
        if not chosen:
            raise MossError("no scenario selected", field="--scenarios")
        options = AuditOptions(
            requests=requests,
            scenarios=chosen,
            level=level,
            min_snr_db=min_snr_db,
            strict_unseeded=strict_unseeded,
            max_batch=max_batch,
            synth=synth_options(
                deploy=deploy,
                model=model,
                codec=codec,
                device=device,
                dtype=dtype,
                legacy_global_rng=legacy_global_rng,
                batch_invariant=batch_invariant,
                threads=threads,
                allow_foreign_deploy=allow_foreign_deploy,
            ),
        )
        if golden is not None and not golden.is_file():
            raise MossError("golden file does not exist", file=golden, field="--golden")
        result = run_audit(options)
        check = check_golden(golden, result) if golden is not None else None
        write_reports(
            result, check, json_path=json_path, junit_path=junit, markdown_path=markdown, report_dir=report_dir
        )
        if save_golden_path is not None:
            save_golden(save_golden_path, result)
    render(stdout, result, check)
    s = summary(result, check)
    if s["failures"]:
        stderr.print(f"audit found violations ({s['failures']})", style="red")
    if check is not None and not check.passed:
        stderr.print(f"golden drift: {check.describe()}", style="red", soft_wrap=True, markup=False)
    if s["warnings"]:
        stderr.print(
            f"{s['warnings']} warning(s): requests with different content produced identical codes "
            "(a likely mix-up; see the report)",
            style="yellow",
        )
    raise typer.Exit(s["exit_code"])
