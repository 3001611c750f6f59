"""The verdict of an audit in numbers: what every report (terminal, JSON, JUnit, Markdown) starts from."""

from __future__ import annotations

from collections import Counter

from ..measures.words import corpus_text
from .golden import GoldenCheck
from .runner import AuditResult
from .verdicts import SAME_SPEECH, Case

QUESTIONS = {"seed": "Seed", "numerics": "Numerics"}  # the two questions, as every report names them


def question_lines(result: AuditResult) -> list[str]:
    """The first lines of every report: the seed question's answer, then the numerics'."""
    return [f"{name}: {result.questions[key]['line']}" for key, name in QUESTIONS.items() if key in result.questions]


def words_line(result: AuditResult) -> str | None:
    """--asr-model: the corpus error rates alone and under load, the model, the normalizer and the ASR's time."""
    words = result.questions.get("numerics", {}).get("words")
    if not words or words.get("passed") is None:
        return None
    where = f" over {words['responses']} responses"
    return (
        f"Words: {corpus_text(words, where)}; {words['above_half']} above 50%; "
        f"heard by {words['model']}, normalized by {words['normalizer']}; ASR {words['asr_seconds']:.1f} s"
    )


def summary(result: AuditResult, golden: GoldenCheck | None) -> dict:
    by_scenario: dict[str, Counter] = {}
    for case in result.cases:
        by_scenario.setdefault(case.scenario, Counter())[case.verdict] += 1
    causes = Counter(case.attribution.cause for case in result.cases if case.failed and case.attribution)
    passed = result.passed and (golden is None or golden.passed)
    return {
        "passed": passed,
        "exit_code": 2 if result.stopped is not None else 0 if passed else 1,
        "incomplete": None if result.stopped is None else result.stopped.as_dict(),
        "level": result.options.level,
        "requests": len(result.requests),
        "cases": len(result.cases),
        "failures": sum(c.failed for c in result.cases),
        "unseeded": sum(c.verdict == "unseeded" for c in result.cases),
        "same_speech": sum(c.verdict == SAME_SPEECH for c in result.cases),
        "scenarios": {name: dict(counts) for name, counts in by_scenario.items()},
        "causes": dict(causes),
        "golden_drift": None if golden is None else len(golden.drifts),
        "warnings": len(result.mixups),
        "elapsed_s": round(result.elapsed_s, 3),
        "compile_s": None if result.compile_s is None else round(result.compile_s, 3),
    }


def outcome(s: dict) -> str:
    """PASSED, or FAILED with what failed: violations, golden drift or both."""
    if s["passed"]:
        return "PASSED"
    if s["incomplete"]:
        return f"INCOMPLETE (stopped in {s['incomplete']['scenario']})"
    reasons = (["violations"] if s["failures"] else []) + (["golden drift"] if s["golden_drift"] else [])
    return f"FAILED ({' and '.join(reasons)})"


def worst_cases(result: AuditResult) -> list[Case]:
    failed = [c for c in result.cases if c.failed]

    def earliest(c: Case) -> tuple:
        cmp = c.comparison
        if cmp is None:
            return (10**9, float("inf"))
        return (
            cmp.first_frame if cmp.first_frame is not None else 10**9,
            cmp.first_diverging_s if cmp.first_diverging_s is not None else float("inf"),
        )

    return sorted(failed, key=earliest)
