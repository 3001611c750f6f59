"""Verdicts on a server seen from outside: only its audio (and `moss serve`'s headers, when sent).

Everything rests on the repeat: a request sent alone twice must give the same audio, or no other
comparison of it means anything. Then:
- `identical`: every comparison of the request passed;
- `batch-dependent`: identical alone-vs-alone, different in a composition (concurrent, shuffled,
  neighbours, staggered, voices): what another request did changed its audio;
- `run-to-run`: different alone-vs-alone although nothing random should differ (greedy decoding,
  or a seed the server says it applied);
- `deploy-seed-not-applied`: the deploy seed is known (--deploy, or the server reports it) and an
  unseeded request differs alone-vs-alone, or differs from the same request sent with that seed:
  the deploy-seed fix is not in effect (vllm-omni 0.30.0 draws unseeded audio from the
  process-wide RNG);
- `seed-ignored`: one explicit seed gives different audio alone, or two different explicit seeds
  give identical audio;
- `unseeded`: no explicit seed and no known deploy seed, and different alone-vs-alone, or the
  server says it used none; a failure only with --strict-unseeded, as in the local audit.
"""

from __future__ import annotations

from dataclasses import dataclass

from .attribution import Attribution
from .compare import Output, compare
from .runner import Case, violates

BATCH_DEPENDENT, RUN_TO_RUN, SEED_IGNORED, UNSEEDED = "batch-dependent", "run-to-run", "seed-ignored", "unseeded"
DEPLOY_SEED_NOT_APPLIED = "deploy-seed-not-applied"
IDENTICAL = "identical"
# A request's verdict: the first that applies.
VERDICTS = (RUN_TO_RUN, DEPLOY_SEED_NOT_APPLIED, BATCH_DEPENDENT, SEED_IGNORED, UNSEEDED)
# Why an unseeded request's audio can vary on vllm-omni (paths: the vllm_omni package of its 0.30.0 wheel).
UNSEEDED_CAUSES = (
    "the deploy seed does not reach the residual sampler (vllm-omni 0.30.0 gives tts_local_seed to seeded "
    "requests only, entrypoints/openai/serving_speech.py:2036-2044, and an unseeded request's audio draws from "
    "the process-wide RNG, worker/gpu_model_runner.py:1968-1979)"
)
RETRY_CAUSE = (
    "or a retry with a random seed (vllm-omni retries an unseeded, non-streaming request without "
    "max_new_tokens once with a random seed when its adapter rejects the generated audio: "
    "entrypoints/openai/serving_speech.py:2632-2657; 0.30.0's MOSS adapter rejects none, tts_adapters/base.py:301-314)"
)
DEPLOY_HINT = "pass --deploy FILE (the deploy file the server runs) to check that unseeded requests get its seed"


@dataclass(frozen=True)
class Rules:
    level: str
    min_snr_db: float
    strict_unseeded: bool
    sample_rate: int
    deploy_seed: int | None = None  # the stage-0 seed of --deploy: unseeded requests must be its audio
    greedy: frozenset[str] = frozenset()  # requests the server decodes greedily (it honours audio_temperature 0)


def unseeded_causes(request) -> str:
    """The possible causes of an unseeded request's varying audio, for its detail."""
    causes = f"possible causes: {UNSEEDED_CAUSES}"
    if request.max_new_frames is None:
        causes += ", " + RETRY_CAUSE
    return causes


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
    if request.id in rules.greedy:
        return Alone(False, RUN_TO_RUN, "greedy decoding, yet two runs alone differ")
    if request.seed is not None:
        return Alone(
            False,
            SEED_IGNORED,
            f"explicit seed {request.seed}, yet two runs alone differ: the server ignores the seed, or is not "
            "deterministic with a fixed seed",
        )
    if rules.deploy_seed is not None:
        return Alone(
            False,
            DEPLOY_SEED_NOT_APPLIED,
            f"no explicit seed, and two runs alone differ although the deploy file gives stage-0 seed "
            f"{rules.deploy_seed}; {unseeded_causes(request)}",
        )
    if reference.seed_source in ("none", "unknown"):
        return Alone(
            False,
            UNSEEDED,
            f"no explicit seed, and two runs alone differ: no deploy seed reaches it, so the audio varies; "
            f"{unseeded_causes(request)}" + ("" if reference.seed_source == "none" else f"; {DEPLOY_HINT}"),
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
    if scenario == "seeds":
        where = "the deploy file's" if rules.deploy_seed is not None else "the server's reported"
        return _fail(
            case,
            DEPLOY_SEED_NOT_APPLIED,
            f"sent with {where} stage-0 seed {out.seed} explicitly, it gives other audio than without a seed: "
            "unseeded requests do not get the deploy seed as their residual sampler's seed",
        )
    if reference.seed_source == "none" and rules.deploy_seed is None:  # the server says so: not a failure
        return _unseeded(case, f"the server reports no seed for it; it differs in {scenario}/{run}", rules)
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
