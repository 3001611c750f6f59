"""A waveform measure is one record in measures/waveform.py: registered there (here, by monkeypatching
the registry), it reaches every report with no other module touched: the audit's comparison and its
page, a `moss diff` case, its Markdown and page, and the one-line summaries."""

import numpy as np
import pytest
import soundfile as sf
import torch

from moss_cli.audit.attribution import codec_numeric
from moss_cli.audit.compare import compare, format_audio
from moss_cli.audit.formats import to_json as audit_json
from moss_cli.audit.options import AuditOptions
from moss_cli.audit.page import audit_view
from moss_cli.audit.runner import AuditResult
from moss_cli.audit.verdicts import Case
from moss_cli.diff.compare import diff_runs
from moss_cli.diff.formats import markdown as diff_markdown
from moss_cli.diff.formats import to_json as diff_json
from moss_cli.diff.page import diff_view
from moss_cli.diff.sides import Side
from moss_cli.io.audio import pcm_sha256
from moss_cli.io.outcome import Outcome
from moss_cli.measures import waveform

RATE = 24_000


def _mean_abs_difference(reference: torch.Tensor, other: torch.Tensor) -> float:
    n = min(reference.shape[-1], other.shape[-1])
    return float((reference[..., :n] - other[..., :n]).abs().mean())


MEAN_ABS = waveform.WaveformMeasure(
    "mean_abs_diff", "mean abs difference", "mean abs", "", _mean_abs_difference, "{:.3e}".format
)


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    monkeypatch.setattr(waveform, "MEASURES", (*waveform.MEASURES, MEAN_ABS))


def _clips() -> tuple[np.ndarray, np.ndarray]:
    """A clip and a copy with 100 samples moved by 3 steps: mean abs 300 / 4800 steps."""
    pcm = (torch.randn(4800, 1, generator=torch.Generator().manual_seed(0)) * 3000).to(torch.int16).numpy()
    other = pcm.copy()
    other[2000:2100, 0] += 3
    return pcm, other


EXPECTED = 3 * 100 / 4800 / 32767


def _table_row(table, row: list) -> dict:
    return dict(zip(table.headers, row))


def test_a_registered_measure_reaches_the_audit_comparison_its_line_and_its_page():
    pcm, other = _clips()
    codes = torch.zeros(10, 4, dtype=torch.long)
    outcomes = [Outcome("r", p, RATE, pcm_sha256(p), "request", seed=1, frames=10, codes=codes) for p in (pcm, other)]
    cmp = compare(*outcomes, RATE)
    got = cmp.as_dict()
    assert got["mean_abs_diff"] == pytest.approx(EXPECTED, rel=1e-4)
    measured = ["snr_db", "log_spectral_distance", "max_abs_diff", "mean_abs_diff"]
    assert [k for k in got if k in measured] == measured  # each at the top level, in the registry's order
    assert format_audio(cmp).endswith(f", mean abs {EXPECTED:.3e}")

    case = Case("batched", "max-batch-8", "r", "request", "fail", cmp, codec_numeric(cmp))
    result = AuditResult(AuditOptions(level="bitwise"), [case], {}, {}, {}, 1.0, RATE, ["r"])
    view = audit_view(audit_json(result, None))
    row = _table_row(view.comparisons, view.comparisons.rows[0])
    assert row["mean abs"] == f"{EXPECTED:.3e}" and view.comparisons.headers[-2:] == ["mean abs", "pair"]
    assert ("mean abs difference", f"{EXPECTED:.3e}") in view.pairs[0].metrics


def _side(folder, label: str, clips: dict[str, np.ndarray]) -> Side:
    folder.mkdir()
    rows = {}
    for key, pcm in clips.items():
        sf.write(str(folder / f"{key}.wav"), pcm, RATE, subtype="PCM_16")
        rows[key] = {"id": key, "codes_sha256": "c" * 64, "pcm_sha256": pcm_sha256(pcm), "seed": 1, "frames": 10}
    return Side(label, folder, "run", rows)


def test_a_registered_measure_reaches_the_diff_case_its_reports_and_its_page(tmp_path):
    pcm, other = _clips()
    a = _side(tmp_path / "a", "A", {"same": pcm, "moved": pcm})
    b = _side(tmp_path / "b", "B", {"same": pcm, "moved": other})
    result = diff_runs(a, b)
    doc = diff_json(result)
    cases = {c["id"]: c for c in doc["cases"]}
    assert cases["moved"]["mean_abs_diff"] == pytest.approx(EXPECTED, rel=1e-4)
    assert "mean_abs_diff" in cases["same"] and cases["same"]["mean_abs_diff"] is None  # listed, not measured
    assert f"max abs 9.16e-05, mean abs {EXPECTED:.3e} |" in diff_markdown(result)

    view = diff_view(doc)
    rows = {r[2]: _table_row(view.comparisons, r) for r in view.comparisons.rows}
    assert rows["moved"]["mean abs"] == f"{EXPECTED:.3e}" and rows["same"]["mean abs"] == "-"
    assert ("mean abs difference", f"{EXPECTED:.3e}") in view.pairs[0].metrics
