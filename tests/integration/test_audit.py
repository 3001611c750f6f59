"""`moss audit-determinism`: scenarios, verdicts, attribution, reports, golden baselines."""

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import torch
from cli_runs import moss_audit  # tests/ is on sys.path
from safetensors.torch import load_file, save_file

from moss_cli.assets import TINY_CODEC, TINY_TALKER
from moss_cli.audit.runner import AuditOptions, run_audit
from moss_cli.audit.scenarios import SCENARIOS
from moss_cli.numerics import probes
from moss_cli.pipeline import Synthesizer, SynthOptions
from moss_cli.report.metrics import describe_change

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.slow
def test_default_audit_passes_at_codes_level_and_writes_parseable_reports(tmp_path):
    result = moss_audit("--json", tmp_path / "a.json", "--junit", tmp_path / "a.xml", "--markdown", tmp_path / "a.md")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["summary"]["passed"] and report["summary"]["failures"] == 0
    assert set(report["summary"]["scenarios"]) == set(SCENARIOS)
    assert {c["scenario"] for c in report["cases"]} == set(SCENARIOS)
    suites = ET.parse(tmp_path / "a.xml").getroot()
    scenarios = [s for s in suites if s.get("name") not in ("audit.seed", "audit.numerics")]  # the two questions
    assert {s.get("name") for s in scenarios} == {f"audit.{s}" for s in SCENARIOS}
    assert sum(int(s.get("tests")) for s in scenarios) == len(report["cases"]) and suites.get("failures") == "0"
    assert report["questions"]["seed"]["verdict"] == "pass"
    assert report["questions"]["numerics"]["verdict"] == "batch-invariant"
    assert "passed" in (tmp_path / "a.md").read_text()


def test_legacy_global_rng_fails_with_rng_coupling_and_the_first_diverging_draw(tmp_path):
    result = moss_audit(
        "--legacy-global-rng",
        "--scenarios",
        "repeat,batched",
        "--json",
        tmp_path / "l.json",
        "--junit",
        tmp_path / "l.xml",
    )
    assert result.exit_code == 1, result.output
    cases = json.loads((tmp_path / "l.json").read_text())["cases"]
    assert all(c["verdict"] == "pass" for c in cases if c["scenario"] == "repeat")  # reproducible run to run
    coupled = [c for c in cases if c["verdict"] == "fail" and c["attribution"]["cause"] == "rng-coupling"]
    assert coupled
    for case in coupled:
        assert case["comparison"]["first_frame"] is not None and case["comparison"]["first_codebook"] is not None
    failures = ET.parse(tmp_path / "l.xml").getroot().iter("failure")
    assert any(f.get("type") == "rng-coupling" and "first diverging frame" in f.text for f in failures)


def _perturb_batched_rows(key, frame, codebook, logits, batch, generator):
    # A tiny change (at most 0.01 on logits of magnitude ~4) to rows that share a batch; rows alone
    # are untouched. It flips a draw now and then, as numeric batch variance does.
    if batch > 1:
        return logits + 1e-2 * torch.sin(torch.arange(logits.shape[-1], dtype=logits.dtype) * 7.0)
    return None


def test_injected_numeric_perturbation_is_attributed_numeric_not_rng_coupling(tmp_path):
    requests = tmp_path / "seeded.jsonl"
    requests.write_text(
        "".join(
            f'{{"id": "r{i}", "text": "Request number {i} in a batch.", "seed": {i}, "max_new_frames": 60}}\n'
            for i in range(6)
        )
    )
    result = run_audit(
        AuditOptions(
            requests=requests, scenarios=("batched",), synth=SynthOptions(device="cpu"), perturb=_perturb_batched_rows
        )
    )
    causes = [c.attribution.cause for c in result.cases if c.verdict == "fail"]
    assert causes and set(causes) == {"numeric"}
    case = next(c for c in result.cases if c.verdict == "fail")
    assert case.attribution.max_logit_diff > 0 and case.attribution.head is not None


def test_unseeded_requests_that_vary_alone_are_not_reproducible_unless_allowed(tmp_path):
    """Without a deploy seed an unseeded request draws from the global RNG: two runs alone differ, so
    it is not reproducible (exit 1, its cause named); --allow-unseeded reports it as `unseeded`,
    which fails only with --strict-unseeded."""
    requests = tmp_path / "r.jsonl"
    requests.write_text(
        '{"id": "free", "text": "No seed anywhere.", "max_new_frames": 20}\n'
        '{"id": "pinned", "text": "This one is seeded.", "seed": 5, "max_new_frames": 20}\n'
    )
    deploy = RECIPES / "moss_tts_local_tiny_unseeded.yaml"
    scenarios = ("--deploy", deploy, "--scenarios", "repeat,batched", "--json", tmp_path / "r.json")
    failed = moss_audit(requests, *scenarios)
    assert failed.exit_code == 1, failed.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdicts"]["free"]["verdict"] == "unseeded-not-reproducible"
    assert "the deploy file gives stage 0 no seed" in report["verdicts"]["free"]["detail"]
    assert report["verdicts"]["pinned"]["verdict"] == "identical"
    assert "requests: 1 identical, 1 unseeded-not-reproducible" in " ".join(failed.output.split())
    relaxed = moss_audit(requests, *scenarios, "--allow-unseeded")
    assert relaxed.exit_code == 0, relaxed.output
    cases = json.loads((tmp_path / "r.json").read_text())["cases"]
    assert {c["verdict"] for c in cases if c["request"] == "free"} == {"unseeded"}
    assert {c["verdict"] for c in cases if c["request"] == "pinned"} == {"pass"}
    strict = moss_audit(requests, "--deploy", deploy, "--scenarios", "repeat", "--strict-unseeded")
    assert strict.exit_code == 1


@pytest.mark.slow
def test_golden_baseline_passes_on_the_same_machine_and_reports_drift_for_a_changed_checkpoint(tmp_path):
    golden = tmp_path / "golden.json"
    saved = moss_audit("--scenarios", "repeat", "--save-golden", golden)
    assert saved.exit_code == 0, saved.output
    data = json.loads(golden.read_text())
    assert {"torch_version", "device", "dtype", "threads", "talker_checkpoint"} <= set(data["environment"])
    assert data["environment"]["codec_tiles"] == "256 rows, the last padded to 4 up to 64, to 64 beyond"
    assert data["environment"]["prefill"] == "prompts share forwards of up to 256 rows, padded to 32"
    same = moss_audit("--scenarios", "repeat", "--golden", golden)
    assert same.exit_code == 0, same.output
    pinned = moss_audit(
        "--scenarios", "repeat", "--golden", golden, "--layout", "blocks:3", "--json", tmp_path / "p.json"
    )
    layout_change = json.loads((tmp_path / "p.json").read_text())["golden"]["environment_changes"]["engine_steps"]
    assert layout_change == {"golden": data["environment"]["engine_steps"], "now": "blocks of 3"}
    assert pinned.exit_code in (0, 1)  # drift or not: this CPU may give 3-row blocks the same bits
    assert describe_change("engine_steps", "one block", "blocks of 3") == "decode-step layout one block -> blocks of 3"

    talker = Path(shutil.copytree(TINY_TALKER, tmp_path / "talker"))
    tensors = load_file(str(talker / "model.safetensors"))
    # Codebook 0's entries stored in reverse order: a change that must show in the codes
    # (a tiny nudge to some weight may leave every sampled code as it was).
    tensors["audio_embeddings.0.weight"] = tensors["audio_embeddings.0.weight"].flip(0).contiguous()
    save_file(tensors, str(talker / "model.safetensors"))
    changed = moss_audit(
        "--scenarios",
        "repeat",
        "--golden",
        golden,
        "--model",
        talker,
        "--codec",
        TINY_CODEC,
        "--deploy",
        RECIPES / "moss_tts_local_tiny.yaml",
        "--json",
        tmp_path / "d.json",
    )
    assert changed.exit_code == 1, changed.output
    report = json.loads((tmp_path / "d.json").read_text())
    assert report["golden"]["drifts"] and "talker_checkpoint" in report["golden"]["environment_changes"]


def test_report_dir_holds_every_report_and_the_audio_of_diverging_pairs(tmp_path):
    result = moss_audit("--legacy-global-rng", "--scenarios", "batched", "--report-dir", tmp_path / "rep")
    assert result.exit_code == 1
    names = {p.name for p in (tmp_path / "rep").iterdir()}
    assert {"audit.json", "junit.xml", "summary.md", "diverging"} <= names
    wavs = list((tmp_path / "rep" / "diverging" / "batched").glob("*.wav"))
    assert any(w.name.endswith(".alone.wav") for w in wavs) and len(wavs) % 2 == 0


def test_markdown_goes_to_the_github_step_summary_when_set(tmp_path, monkeypatch):
    summary = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = moss_audit("--scenarios", "repeat")
    assert result.exit_code == 0
    assert "moss audit-determinism" in summary.read_text()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--scenarios", "nope"], "unknown scenario"),
        (["--level", "loose"], "unknown level"),
        (["--golden", "/nonexistent/golden.json"], "golden file does not exist"),
        (["--golden", str(Path(__file__).parent)], "is a directory, expected a golden file"),
    ],
)
def test_bad_audit_options_exit_2(args, message):
    result = moss_audit(*args)
    assert result.exit_code == 2 and message in result.output


@pytest.mark.slow
def test_the_audit_passes_bitwise_with_fixed_blocks_forced(tmp_path):
    """Every scenario (alone, batched, other batch sizes, neighbours, arrivals, streaming, shards)
    gives each request the bits it gets alone under the fixed-block fallback too."""
    out = tmp_path / "a.json"
    result = moss_audit("--layout", "blocks", "--level", "bitwise", "--max-batch", 5, "--json", out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["summary"]["passed"] and set(report["summary"]["scenarios"]) == set(SCENARIOS)
    # one block of --max-batch rows (8 where this CPU's 5-row products give a row's bits by its place)
    synth = Synthesizer(SynthOptions(device="cpu", max_batch=5))
    rows = 5 if probes.fixed_blocks_are_invariant(synth.talker, 5) else 8
    assert report["environment"]["engine_steps"] == f"blocks of {rows}"


def test_length_mix_long_neighbours_ask_three_times_the_longest_budget_past_the_deploys_max_tokens(tmp_path):
    """A request's max_new_frames replaces the deploy's max_tokens (200 in the tiny recipe), larger or smaller:
    the long neighbours are not held to it, and the engine gives them what they ask (within max_model_len)."""
    from moss_cli.audit.engine_executor import EngineExecutor
    from moss_cli.audit.scenarios import build_runs

    requests = tmp_path / "r.jsonl"
    requests.write_text(json.dumps({"id": "long", "text": "A long one.", "seed": 1, "max_new_frames": 100}) + "\n")
    executor = EngineExecutor(AuditOptions(requests=requests, synth=SynthOptions(device="cpu")))
    assert executor.synth.deploy.max_tokens == 200
    [run] = build_runs("length-mix", executor.audited, executor.target, tmp_path)
    budgets = sorted({m.request.max_new_frames for m in run.members if not m.audited})
    assert budgets == [300]
    neighbour = next(m.request for m in run.members if m.request.max_new_frames == 300)
    [prepared] = executor.synth.prepare([neighbour])
    assert prepared.max_new_frames == 300
