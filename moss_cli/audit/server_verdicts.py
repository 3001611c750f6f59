"""Verdicts on a server seen from outside: only its audio (and `moss serve`'s headers, when sent).

Everything rests on the repeat: a request sent alone twice must give the same audio, or no other
comparison of it means anything. Then:
- `identical`: every comparison of the request passed;
- `batch-dependent`: identical alone-vs-alone, different in a composition (concurrent, shuffled,
  neighbours, staggered, voices): what another request did changed its audio;
- `run-to-run`: different alone-vs-alone although nothing random should differ (greedy decoding,
  or a seed the server says it applied);
- `seed-ignored`: one explicit seed gives different audio alone, two different explicit seeds give
  identical audio, or the deploy seed the server reports, sent explicitly, gives other audio;
- `unseeded`: no explicit seed and different alone-vs-alone (the server applies no deploy seed),
  or the server says it used none; a failure only with --strict-unseeded, as in the local audit.
"""

from __future__ import annotations

from dataclasses import dataclass

from .attribution import Attribution
from .compare import Output, compare
from .runner import Case, violates
from .server_scenarios import greedy

BATCH_DEPENDENT, RUN_TO_RUN, SEED_IGNORED, UNSEEDED = "batch-dependent", "run-to-run", "seed-ignored", "unseeded"
IDENTICAL = "identical"
VERDICTS = (RUN_TO_RUN, BATCH_DEPENDENT, SEED_IGNORED, UNSEEDED)  # a request's verdict: the first that applies


@dataclass(frozen=True)
class Rules:
    level: str
    min_snr_db: float
    strict_unseeded: bool
    sample_rate: int


@dataclass(frozen=True)
class Alone:
    """Whether a request is reproducible alone, and if not, what that means."""

    stable: bool
    cause: str | None = None
    detail: str = ""


def alone(request, reference: Output, repeat: Output, rules: Rules) -> Alone:
    cmp = compare(reference, repeat, rules.sample_rate)
    if not violates(cmp, rules.level, rules.min_snr_db):
        return Alone(True)
    if greedy(request):
        return Alone(False, RUN_TO_RUN, "greedy decoding, yet two runs alone differ")
    if request.seed is not None:
        return Alone(
            False,
            SEED_IGNORED,
            f"explicit seed {request.seed}, yet two runs alone differ: the server ignores the seed, or is not "
            "deterministic with a fixed seed",
        )
    if reference.seed_source in ("none", "unknown"):
        return Alone(
            False,
            UNSEEDED,
            "no explicit seed, and two runs alone differ: the server applies no deploy seed, so the audio is "
            "expected to vary",
        )
    return Alone(
        False,
        RUN_TO_RUN,
        f"the server reports a {reference.seed_source} seed, yet two runs alone differ",
    )


def judge(
    scenario: str,
    run: str,
    key: str,
    reference: Output,
    out: Output,
    request_alone: Alone,
    rules: Rules,
    *,
    expect: str = "identical",
    evidence: str = "",
) -> Case:
    """One audited send compared with its reference. `expect` "different": a seed probe, whose
    audio must change; `evidence`: how many requests were in flight with it, for the detail."""
    cmp = compare(reference, out, rules.sample_rate)
    case = Case(scenario, run, key, reference.seed_source, "pass", cmp, wall_s=out.wall_s)
    identical = cmp.pcm_equal and cmp.codes_equal is not False
    if expect == "different":
        if identical:
            sent = f"seed {reference.seed}" if reference.seed_source == "request" else "no seed"
            return _fail(case, SEED_IGNORED, f"{sent} and seed {out.seed} give identical audio: the seed is ignored")
        return case if request_alone.stable else _as_alone(case, request_alone, rules)
    if not violates(cmp, rules.level, rules.min_snr_db):
        return case
    if not request_alone.stable:
        return _as_alone(case, request_alone, rules)
    if reference.seed_source == "none":  # the server says so: as the local audit, not a failure
        return _unseeded(case, f"the server reports no seed for it; it differs in {scenario}/{run}", rules)
    if scenario == "seeds":
        return _fail(
            case,
            SEED_IGNORED,
            f"the deploy seed the server reports ({out.seed}), sent explicitly, gives other audio than no seed: "
            "the deploy seed does not reach the sampler as a request seed would",
        )
    return _fail(
        case,
        BATCH_DEPENDENT,
        f"identical in two runs alone, different in {scenario}/{run}{evidence}",
    )


def _fail(case: Case, cause: str, detail: str) -> Case:
    case.verdict = "fail"
    case.attribution = Attribution(cause, detail)
    return case


def _unseeded(case: Case, detail: str, rules: Rules) -> Case:
    case.verdict = "fail" if rules.strict_unseeded else "unseeded"
    case.attribution = Attribution(UNSEEDED, detail)
    return case


def _as_alone(case: Case, request_alone: Alone, rules: Rules) -> Case:
    """A comparison of a request that is not reproducible alone takes that verdict."""
    detail = request_alone.detail
    if case.scenario != "repeat":
        detail += f"; so {case.scenario}/{case.run} cannot be judged"
    if request_alone.cause == UNSEEDED:
        return _unseeded(case, detail, rules)
    return _fail(case, request_alone.cause, detail)


def request_verdicts(cases: list[Case], requests: list[str]) -> dict[str, dict]:
    """Each request's verdict (the first of VERDICTS that any of its comparisons shows, else
    `identical`), every cause seen, and the detail of the comparison that decided it."""
    found: dict[str, dict[str, Case]] = {key: {} for key in requests}
    for case in cases:
        if case.attribution is not None and case.verdict != "pass":
            found[case.request].setdefault(case.attribution.cause, case)
    out = {}
    for key in requests:
        causes = [v for v in VERDICTS if v in found[key]]
        first = found[key][causes[0]] if causes else None
        out[key] = {
            "verdict": causes[0] if causes else IDENTICAL,
            "verdicts": causes,
            "detail": first.attribution.detail if first else "identical in every comparison",
            "where": f"{first.scenario}/{first.run}" if first else None,
        }
    return out
