"""The two questions every audit answers apart, from its judged comparisons (verdicts.Case):

- seed: is each request's randomness its own? Decided on runs alone only (the repeat, the seed
  probes, a batch item sent alone: bitwise at every level, as a request alone has the same shapes
  every time), and on the local engine by replaying compositions (`rng-coupling`: the random stream
  itself depends on the batch). A composition's bare audio never decides it.
- numerics: does the arithmetic depend on the batch? Requests identical alone that differ in
  compositions (`numeric-batch-variance` where seeded requests do too; `batch-dependent` where only
  unseeded ones do; `different-speech` at --level speech where a response is not the same speech).

`answer(cases, requests, level, server, seeded)` -> {"seed": {...}, "numerics": {...}}, each with its verdict,
`passed` (None: not checked), the requests it names and `line`: the sentence every report leads with."""

from __future__ import annotations

from ..vllm_omni import BATCH_INVARIANT_ADVICE
from .scenarios import DEPLOY_SEED_PROBE
from .verdicts import (
    BATCH_DEPENDENT,
    DIFFERENT_SPEECH,
    DIFFERENT_WORDS,
    NUMERIC_BATCH_VARIANCE,
    NUMERIC_CAUSES,
    SAME_SPEECH,
    SEED_CAUSES,
    UNSEEDED,
    Case,
)

SEED = "is each request's randomness its own?"
NUMERICS = "does the arithmetic depend on the batch?"
PASS, NOT_CHECKED, BATCH_INVARIANT = "pass", "not checked", "batch-invariant"
LOCAL_ADVICE = "moss's batch-invariant kernels (--batch-invariant, the default) make the bits stable"


def answer(
    cases: list[Case], requests: list[str], level: str, server: bool, seeded: set[str], words: float | None = None
) -> dict:
    """`seeded`: the requests that carry a seed of their own (as sent: a server may report another source);
    `words`: with --asr-model, the largest rise of the corpus error rate under load (its tolerance)."""
    mine = [c for c in cases if c.request in set(requests)]
    seeded = seeded & set(requests)
    numerics = numerics_question(mine, seeded, level, server)
    if words is not None:
        _with_words(numerics, composed_cases(mine), words)
    elif level == "speech" and numerics["verdict"] != NOT_CHECKED:
        from ..measures.judgement import WORDS_UNCHECKED

        numerics["line"] += f" At --level speech {WORDS_UNCHECKED}."
    return {"seed": seed_question(mine, requests, seeded), "numerics": numerics}


def _with_words(numerics: dict, composed: list[Case], tolerance: float) -> None:
    """The corpus error rate alone and under load (measures.words.corpus), over every composition and per
    composition: a rise whose 95% interval lies above the tolerance fails the numerics question."""
    from ..measures.words import Score, corpus, corpus_text

    def pairs(cases: list[Case]) -> list:
        return [
            (
                Score("", c.wer["errors_alone"], c.wer["tokens"]),
                Score(c.wer["transcript"], c.wer["errors"], c.wer["tokens"]),
            )
            for c in cases
            if c.wer is not None
        ]

    scored = pairs(composed)
    if not scored:
        return
    scenarios = dict.fromkeys(c.scenario for c in composed if c.wer is not None)
    words = {
        **corpus(scored, tolerance),
        "scenarios": {s: corpus(pairs([c for c in composed if c.scenario == s]), tolerance) for s in scenarios},
    }
    numerics["words"] = words
    failing = [s for s, w in words["scenarios"].items() if w["passed"] is False]
    if words["passed"] is False or failing:
        said = corpus_text(words) + (f"; above the tolerance in {', '.join(failing)}" if failing else "")
        if numerics["passed"] is False:  # a failure already: the words are more evidence
            numerics["line"] += f"; the words under load: {said}"
        else:
            numerics["verdict"], numerics["line"] = DIFFERENT_WORDS, f"FAIL {DIFFERENT_WORDS} — {said}"
        numerics["passed"] = False


def seed_cases(cases: list[Case]) -> list[Case]:
    """The comparisons the seed question rests on: those alone, and any whose cause is the seed's."""
    return [
        c for c in cases if c.alone or (c.attribution and c.verdict != "pass" and c.attribution.cause in SEED_CAUSES)
    ]


def composed_cases(cases: list[Case]) -> list[Case]:
    """The comparisons of requests in compositions (not alone, not a mix-up, not the reference run)."""
    return [c for c in cases if not c.alone and c.other is None and c.scenario != "reference"]


def _names(keys) -> str:
    keys = list(keys)
    return ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")


def _how(alone: list[Case]) -> str:
    ways = {"repeat": "alone-vs-alone", DEPLOY_SEED_PROBE: "against the deploy seed sent explicitly"}
    said = dict.fromkeys(ways.get(c.run, "against another seed" if c.scenario == "seeds" else f"{c.scenario} alone")
                         for c in alone)  # fmt: skip
    return ", ".join(said) + ", bitwise"


def seed_question(cases: list[Case], requests: list[str], seeded: set[str]) -> dict:
    alone = [c for c in cases if c.alone]
    found = [c for c in seed_cases(cases) if c.verdict != "pass" and c.attribution.cause in SEED_CAUSES]
    failed = {c.request: c.attribution.cause for c in found if c.failed}
    warned = {c.request: c.attribution.cause for c in found if not c.failed and c.request not in failed}
    unseeded = [key for key in requests if key not in seeded]
    out = {
        "question": SEED,
        "requests": len(requests),
        "unseeded": len(unseeded),
        "comparisons": len(alone),
        "how": _how(alone) if alone else None,
        "failed": failed,
        "warned": warned,
    }
    whose = "every unseeded request's" if unseeded else "every request's"
    if failed:
        verdict = next(cause for cause in SEED_CAUSES if cause in failed.values())
        first = next(c for c in found if c.failed and c.attribution.cause == verdict)
        line = (
            f"FAIL {verdict} — {len(failed)} of {len(requests)} requests ({_names(failed)}); "
            f"first in {first.scenario}/{first.run}: {first.attribution.detail}"
        )
        return {**out, "verdict": verdict, "passed": False, "line": line}
    if warned:
        first = next(c for c in found if not c.failed)
        line = (
            f"warning unseeded — {len(warned)} of {len(requests)} requests ({_names(warned)}) vary, accepted: "
            f"{first.attribution.detail}"
        )
        return {**out, "verdict": UNSEEDED, "passed": True, "line": line}
    if not alone:
        line = "not checked — no request was compared alone with itself (the repeat scenario was not run)"
        return {**out, "verdict": NOT_CHECKED, "passed": None, "line": line}
    line = f"PASS — {whose} randomness is its own ({len(unseeded)} unseeded of {len(requests)} requests; {out['how']})"
    return {**out, "verdict": PASS, "passed": True, "line": line}


def numerics_question(cases: list[Case], seeded: set[str], level: str, server: bool) -> dict:
    composed = composed_cases(cases)
    unsettled = {c.request for c in composed if c.attribution and c.attribution.cause in SEED_CAUSES}
    judged = sorted({c.request for c in composed} - unsettled)
    differing = [c for c in composed if c.verdict != "pass" and c.attribution and c.attribution.cause in NUMERIC_CAUSES]
    differ = list(dict.fromkeys(c.request for c in differing))
    compositions = list(dict.fromkeys(c.scenario for c in differing))
    speech = {}
    for c in differing:
        if c.attribution.cause in (DIFFERENT_SPEECH, DIFFERENT_WORDS):
            speech.setdefault(c.request, []).append(f"{c.scenario}/{c.run}" + (f" ({c.path})" if c.path else ""))
    failed = {c.request: c.attribution.cause for c in differing if c.failed}
    causes = list(dict.fromkeys(c.attribution.cause for c in differing))
    out = {
        "question": NUMERICS,
        "requests": len(judged),
        "differ": differ,
        "seeded": [key for key in differ if key in seeded],
        "compositions": compositions,
        "same_speech": sum(c.verdict == SAME_SPEECH for c in differing),
        "different_speech": speech,
        "failed": failed,
        "causes": causes,
        "advice": None,
    }
    if not composed:
        line = "not checked — no composition was run"
        return {**out, "verdict": NOT_CHECKED, "passed": None, "line": line}
    if not differing and not judged:
        line = "not checked — every request compared in a composition failed the seed question there"
        return {**out, "verdict": NOT_CHECKED, "passed": None, "line": line}
    if not differing:
        line = (
            f"PASS — batch-invariant: each of the {len(judged)} requests reproducible alone is the same in every "
            f"composition (level {level})"
        )
        return {**out, "verdict": BATCH_INVARIANT, "passed": True, "line": line}
    if speech:
        verdict = DIFFERENT_SPEECH if DIFFERENT_SPEECH in causes else DIFFERENT_WORDS
    elif BATCH_DEPENDENT in causes:
        verdict = BATCH_DEPENDENT
    else:
        verdict = NUMERIC_BATCH_VARIANCE
    out["advice"] = BATCH_INVARIANT_ADVICE if server else LOCAL_ADVICE
    share = f"{len(differ)} of {len(judged)} requests ({len(out['seeded'])} seeded)"
    where = f"differ from themselves alone in {', '.join(compositions)}"
    status = "FAIL" if failed else "warning"
    if verdict in (DIFFERENT_SPEECH, DIFFERENT_WORDS):
        said = "; ".join(f"{key} in {', '.join(places)}" for key, places in speech.items())
        line = f"{status} {verdict} — not the same speech as alone: {said}; {share} {where}"
    elif verdict == BATCH_DEPENDENT:
        line = (
            f"{status} {verdict} — {share} {where}; no seeded request does, so this cannot be told from a random "
            "stream shared with the batch"
        )
    else:
        line = f"{status} {verdict} — {share} {where}"
        if out["seeded"]:
            line += "; seeded requests show it too, so no seed explains it: the arithmetic depends on the batch"
    if level == "speech" and not speech:
        line += "; each is the same speech as alone (a warning at --level speech)"
    line += f". {out['advice'][0].upper()}{out['advice'][1:]}"
    return {**out, "verdict": verdict, "passed": not failed, "line": line}
