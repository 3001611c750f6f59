"""The one judge: each audited request in each run against its reference, and each request's
verdict over all its runs, in one vocabulary for the local engine and for a server.

Everything rests on the repeat: a request run alone twice must give the same output, or no other
comparison of it means anything. Then a comparison that differs is, by its first cause:
- `unseeded-not-reproducible`: an unseeded request differs alone-vs-alone and no deploy seed is
  known to the audit: whatever the cause (no stage-0 seed in the deploy config, or a server
  without the deploy-seed fix; --deploy tells the two apart), it is not reproducible, a failure;
  with --allow-unseeded it is `unseeded` instead;
- `unseeded`: no seed reached the request (the global RNG), so it is expected to vary: differences
  in compositions of a request identical alone-vs-alone (its draws share a stream with the batch),
  and with --allow-unseeded those alone too; a failure only with --strict-unseeded;
- `deploy-seed-not-applied`: the deploy seed is known (the deploy file, or the server reports it)
  and an unseeded request differs alone-vs-alone, or differs from the same request sent with that
  seed: the deploy-seed fix is not in effect (vllm-omni 0.30.0 draws unseeded audio from the
  process-wide RNG);
- `seed-ignored`: one explicit seed gives different audio alone, or two different explicit seeds
  give identical audio;
- `run-to-run`: different alone-vs-alone although nothing random should differ (greedy decoding,
  or a seed the server says it applied);
- a batch dependence: `rng-coupling` (the request's random stream depends on the batch) or
  `numeric` (the same stream, other logits), found by replaying both runs where the engine can be
  replayed (or, on `moss serve`, where the server says its draws come from one global stream);
  `codec-numeric` (identical codes, other PCM); where only the audio is known (a server),
  `numeric-batch-variance` once seeded requests differ in compositions too (no seed explains
  that: the server's arithmetic follows the batch; `numeric_variance`), else `batch-dependent`;
- at `--level speech`, a composition's response that differs (a numeric cause) is judged by the
  speech measures (measures.speech): the same speech passes with a warning (case verdict
  `same-speech`, cause `numeric-batch-variance` on a server), other speech fails
  `different-speech`, with each measure next to its threshold;
- `audio-of-another-request` (a server that reports no codes): the request's audio equals, or
  nearly equals, that of another audited request in the same run although the two differ in what
  the talker reads or the voice it clones (mixups.CONDITIONING), so one response carries the other
  request's audio; a server that does so in every composition passes every other comparison.
Comparisons alone (the repeat, the seed probes, a batch item sent alone) are bitwise at every level:
a request alone has the same shapes every time, so no numerics can differ there. They decide the
seed question, compositions the numerics question (questions.py: the two, answered apart).
A request's verdict is the first of VERDICTS among its comparisons' causes, else `identical`; so is
a server path's (`path_verdicts`: the single route, a stream, the batch route), over the comparisons
of what it answered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config.effective import SeedSource
from ..config.requests import Request
from ..io.outcome import Outcome
from ..measures import judgement
from ..measures.judgement import DIFFERENT_SPEECH, DIFFERENT_WORDS, SAME_SPEECH, Tolerances
from ..measures.speech import SpeechJudgement, SpeechThresholds
from ..measures.waveform import format_db
from ..measures.words import WordOptions, WordsJudgement
from ..vllm_omni import BATCH_ITEM_CAUSE, RETRY_CAUSE, UNSEEDED_CAUSES
from .attribution import Attribution, codec_numeric
from .compare import Comparison, compare
from .mixups import MixUp

BATCH_DEPENDENT, RUN_TO_RUN, SEED_IGNORED, UNSEEDED = "batch-dependent", "run-to-run", "seed-ignored", "unseeded"
DEPLOY_SEED_NOT_APPLIED = "deploy-seed-not-applied"
UNSEEDED_NOT_REPRODUCIBLE = "unseeded-not-reproducible"
AUDIO_OF_ANOTHER_REQUEST = "audio-of-another-request"
NUMERIC_BATCH_VARIANCE = "numeric-batch-variance"
RNG_COUPLING = "rng-coupling"
# A case's verdict SAME_SPEECH: it differs, yet is the same speech (a warning); DIFFERENT_SPEECH and
# DIFFERENT_WORDS: the speech level's failures (measures.judgement).
IDENTICAL = "identical"
BATCH_CAUSES = (BATCH_DEPENDENT, "numeric", "codec-numeric")  # verdict: batch-dependent
# What each question's failures are (questions.py): whether a request's randomness is its own, and
# whether the server's arithmetic follows the batch. A mix-up answers neither.
SEED_CAUSES = (RUN_TO_RUN, DEPLOY_SEED_NOT_APPLIED, UNSEEDED_NOT_REPRODUCIBLE, SEED_IGNORED, RNG_COUPLING, UNSEEDED)
NUMERIC_CAUSES = (
    DIFFERENT_SPEECH,
    DIFFERENT_WORDS,
    BATCH_DEPENDENT,
    NUMERIC_BATCH_VARIANCE,
    "numeric",
    "codec-numeric",
    "nondeterministic",
    "unknown",
)
# First: a response that is not its request's audio makes every other comparison of it meaningless;
# then the seed question's failures, which make a request's compositions meaningless; then the numerics'.
VERDICTS = (
    AUDIO_OF_ANOTHER_REQUEST,
    RUN_TO_RUN,
    DEPLOY_SEED_NOT_APPLIED,
    UNSEEDED_NOT_REPRODUCIBLE,
    SEED_IGNORED,
    RNG_COUPLING,
    DIFFERENT_SPEECH,
    DIFFERENT_WORDS,
    BATCH_DEPENDENT,
    NUMERIC_BATCH_VARIANCE,
    UNSEEDED,
)
DEPLOY_HINT = "pass --deploy FILE (the deploy file the server runs) to check that unseeded requests get its seed"
TELL_APART = "--deploy FILE (the deploy file the server runs) tells the two apart"
NO_DEPLOY_SEED_CAUSE = "the server's deploy config gives stage 0 no seed"
GLOBAL_STREAM = "the server reports that every request draws from one global random stream (legacy_global_rng)"


@dataclass
class Case:
    """One audited request in one run."""

    scenario: str
    run: str
    request: str
    seed_source: str
    verdict: str  # "pass" | "fail" | "unseeded" | "same-speech"
    comparison: Comparison | None
    attribution: Attribution | None = None
    wall_s: float = 0.0  # the request's time in this run, plus comparing (and attributing) it
    other: str | None = None  # audio-of-another-request: the request whose audio it was compared with (not alone)
    path: str | None = None  # a server: how it was asked for this audio (a name of remote.paths.PATHS)
    alone: bool = False  # compared alone with alone (the seed question), not in a composition
    speech: SpeechJudgement | None = None  # --level speech: whether it sounds like the same speech as alone
    words: WordsJudgement | None = None  # --level speech with --asr-model: whether it lost words it said alone
    # --level speech with --asr-model, a composition: its transcript's errors against the request's text and
    # its response alone's (errors_alone), over the text's tokens, for the corpus's error rates
    wer: dict | None = None

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"

    def as_dict(self) -> dict:
        return {
            "scenario": self.scenario,
            "run": self.run,
            "request": self.request,
            "seed_source": self.seed_source,
            "verdict": self.verdict,
            "comparison": self.comparison.as_dict() if self.comparison else None,
            "attribution": self.attribution.as_dict() if self.attribution else None,
            "wall_s": self.wall_s,
            "other": self.other,
            "path": self.path,
            "alone": self.alone,
            "speech": self.speech.as_dict() if self.speech else None,
            "words": self.words.as_dict() if self.words else None,
            "wer": self.wer,
        }


@dataclass(frozen=True)
class Rules:
    level: str
    min_snr_db: float
    strict_unseeded: bool
    sample_rate: int
    allow_unseeded: bool = False  # an unseeded request that differs alone-vs-alone is `unseeded`, not a failure
    server: bool = False  # a server: the audio alone (and what its headers say)
    deploy_seed: int | None = None  # the deploy file's stage-0 seed, which unseeded requests must get (server)
    greedy: frozenset[str] = frozenset()  # requests decoded greedily (a server: where it honours it)
    global_stream: bool = False  # the server reports that every request draws from one global random stream
    speech: SpeechThresholds = SpeechThresholds()  # --level speech: what the same speech is
    words: WordOptions | None = None  # --level speech with --asr-model: the words are heard too

    @property
    def tolerances(self) -> Tolerances:
        return Tolerances(self.min_snr_db, self.speech, self.words)

    @classmethod
    def of(cls, options, sample_rate: int, **server) -> Rules:
        """The rules an audit's options (AuditOptions) set, at the executor's sample rate; `server`: what
        a server executor adds (server, deploy_seed, greedy, global_stream)."""
        return cls(
            options.level,
            options.min_snr_db,
            options.strict_unseeded,
            sample_rate,
            allow_unseeded=options.allow_unseeded,
            speech=options.speech,
            words=options.words,
            **server,
        )


@dataclass(frozen=True)
class Alone:
    """Whether a request is reproducible alone, and if not, what that means."""

    stable: bool
    cause: str | None = None
    detail: str = ""


def unseeded_causes(retried: bool, deploy_seed_known: bool = True) -> str:
    """The possible causes of an unseeded request's varying audio on a server, for its detail
    (`retried`: it may be retried with a random seed: no frame budget, not streamed); where the
    deploy seed is not known, a deploy config without one is a cause too, and --deploy tells."""
    causes = f"possible causes: {UNSEEDED_CAUSES}"
    if not deploy_seed_known:
        causes = f"possible causes: {NO_DEPLOY_SEED_CAUSE}, or it gives one and {UNSEEDED_CAUSES}"
    if retried:
        causes += ", " + RETRY_CAUSE
    return causes if deploy_seed_known else f"{causes}; {TELL_APART}"


def identical(cmp: Comparison) -> bool:
    """Bitwise the same: what a comparison alone must be at every level (the same shapes every time)."""
    return cmp.pcm_equal and cmp.codes_equal is not False


def alone(request, reference: Outcome, repeat: Outcome, rules: Rules) -> Alone:
    cmp = compare(reference, repeat, rules.sample_rate)
    if identical(cmp):
        return Alone(True)
    if request.id in rules.greedy:
        return Alone(False, RUN_TO_RUN, "greedy decoding, yet two runs alone differ")
    if reference.seed_source == SeedSource.NONE and not rules.server:  # the local engine: the global RNG
        return _unseeded_alone(
            "no request seed, and the deploy file gives stage 0 no seed: drawn from the global RNG, so two runs "
            "alone differ (give the deploy file a stage-0 seed, or the request a seed)",
            rules,
        )
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
            f"{rules.deploy_seed}; {unseeded_causes(request.max_new_frames is None)}",
        )
    if reference.seed_source == SeedSource.NONE:  # the server says so (moss serve): its deploy gives no seed
        return _unseeded_alone(
            "no explicit seed, and two runs alone differ: the server reports that no seed reached it "
            f"({NO_DEPLOY_SEED_CAUSE})",
            rules,
        )
    if reference.seed_source == SeedSource.UNKNOWN:
        return _unseeded_alone(
            f"no explicit seed, and two runs alone differ; {unseeded_causes(request.max_new_frames is None, False)}",
            rules,
        )
    return Alone(False, RUN_TO_RUN, f"the server reports a {reference.seed_source} seed, yet two runs alone differ")


def _seed_unheard(case: Case, reference: Outcome, out: Outcome, rules: Rules) -> Case:
    """A seed probe whose audio did not change: the request sent alone with the probe's seed gives the
    audio of the request alone as it is. Where the server reports one global random stream, that is why
    (rng-coupling: no request's seed reaches its sampler); otherwise the seed is ignored. The detail
    names the probe and the seeds sent, as they were sent (a server may report others)."""
    probe, own = out.content.get("seed", out.seed), reference.content.get("seed", reference.seed)
    said = (
        f"sent alone with seed {probe} ({case.scenario}/{case.run}), it gives the audio it gives alone with "
        f"{'no seed' if own is None else f'its seed {own}'}"
    )
    if rules.global_stream:
        return _fail(case, RNG_COUPLING, f"{said}: {GLOBAL_STREAM}, so no request's seed reaches its sampler")
    return _fail(case, SEED_IGNORED, f"{said}: the seed is ignored")


def _unseeded_alone(detail: str, rules: Rules) -> Alone:
    """An unseeded request whose two runs alone differ, its deploy seed unknown to the audit: not
    reproducible, whatever the cause (a failure), unless --allow-unseeded accepts it (`unseeded`)."""
    if rules.allow_unseeded:
        return Alone(False, UNSEEDED, detail)
    return Alone(False, UNSEEDED_NOT_REPRODUCIBLE, f"not reproducible: {detail}")


Attribute = Callable[[Comparison], Attribution]  # replays both runs to find why the codes part


def judge(
    scenario: str,
    run: str,
    key: str,
    reference: Outcome,
    out: Outcome,
    request_alone: Alone,
    rules: Rules,
    *,
    expect: str = "identical",
    evidence: str = "",
    attribute: Attribute | None = None,
    batch_item: bool = False,
    sent_alone: bool = False,
    request: Request | None = None,
    path: str | None = None,
) -> Case:
    """One audited member compared with its reference. `expect` "different": a seed probe, whose
    audio must change; `evidence`: how many requests were in flight with it, for the detail;
    `attribute`: where the runs can be replayed (the engine), what explains differing codes;
    `batch_item`: sent as an item of a server's batch call, which carries no seed, so with a known
    deploy seed it must be the deploy seed's audio, as the request alone is; `sent_alone`: in a run
    alone (compared bitwise: the seed question); `request`: its text and language, for the speech level;
    `path`: a server's way of answering it (a name of remote.paths.PATHS)."""
    cmp = compare(reference, out, rules.sample_rate)
    case = Case(scenario, run, key, reference.seed_source, "pass", cmp, wall_s=out.wall_s, alone=sent_alone, path=path)
    if rules.level == "speech" and rules.words is not None and not sent_alone and expect == "identical":
        case.wer = _scored(reference, out, rules, request)
    if expect == "different":
        if identical(cmp):
            return _seed_unheard(case, reference, out, rules)
        return case if request_alone.stable else _as_alone(case, request_alone, rules)
    if identical(cmp) or (not sent_alone and rules.level != "speech" and cmp.passes(rules.level, rules.min_snr_db)):
        return case
    if batch_item and sent_alone and rules.deploy_seed is not None and out.seed_source != "deploy":
        also = "" if request_alone.stable else " (nor are two runs of it alone the same)"
        return _fail(
            case,
            DEPLOY_SEED_NOT_APPLIED,
            f"sent alone as the one item of a batch call, it gives other audio than sent alone as a single request"
            f"{also}, although the deploy file gives stage-0 seed {rules.deploy_seed}: a batch item carries no seed "
            f"(vllm-omni 0.30.0's {BATCH_ITEM_CAUSE}), so it must get the deploy seed, and it does not",
        )
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
    if reference.seed_source == SeedSource.NONE and rules.deploy_seed is None:  # no seed reached it: not a failure
        detail = (
            f"the server reports no seed for it; it differs in {scenario}/{run}"
            if rules.server
            else "no request seed and no deploy seed: drawn from the global RNG, expected to vary"
        )
        return _unseeded(case, detail, rules)
    if cmp.codes_equal:
        case.verdict, case.attribution = "fail", codec_numeric(cmp)
    elif attribute is not None:
        case.verdict, case.attribution = "fail", attribute(cmp)
    else:
        _fail(case, BATCH_DEPENDENT, f"identical in two runs alone, different in {scenario}/{run}{evidence}")
    if rules.level == "speech" and case.attribution.cause in NUMERIC_CAUSES:
        _by_speech(case, reference, out, rules, request)
    return case


def _scored(reference: Outcome, out: Outcome, rules: Rules, request: Request | None) -> dict | None:
    """A composition's response and its response alone, each transcribed and scored against the text."""
    text = request.text if request is not None else reference.text
    if not text:
        return None
    language = request.prompt_fields.get("language") if request is not None else None
    clips = (reference.waveform, out.waveform, rules.sample_rate)
    alone, here = judgement.scores(clips, text, language, rules.words)
    return {"errors": here.errors, "errors_alone": alone.errors, "tokens": here.tokens, "transcript": here.transcript}


def _by_speech(case: Case, reference: Outcome, out: Outcome, rules: Rules, request: Request | None) -> None:
    """--level speech: a numeric difference is a warning where the response is the same speech as
    alone (measures.judgement), else a failure (`different-speech`, `different-words`) naming the evidence."""
    text = request.text if request is not None else reference.text
    language = request.prompt_fields.get("language") if request is not None else None
    cmp = case.comparison
    judged = judgement.judge(
        "speech", rules.tolerances, pcm_equal=cmp.pcm_equal, codes_equal=cmp.codes_equal, snr_db=cmp.snr_db,
        clips=(reference.waveform, out.waveform, rules.sample_rate), text=text, language=language,
    )  # fmt: skip
    case.speech, case.words = judged.speech, judged.words
    where = f"{case.scenario}/{case.run}" + (f" ({case.path} path)" if case.path else "")
    if judged.passed:
        cause = NUMERIC_BATCH_VARIANCE if case.attribution.cause == BATCH_DEPENDENT else case.attribution.cause
        case.verdict = SAME_SPEECH
        case.attribution = Attribution(
            cause, f"{case.attribution.detail}; the same speech as alone ({judged.describe()})"
        )
        return
    if judged.status == DIFFERENT_WORDS:
        lost = ", ".join(repr(a["word"]) for a in judged.words.accused)
        detail = f"other words than alone in {where}: lost {lost} ({judged.describe()})"
    else:
        detail = f"not the same speech as alone in {where}: {judged.speech.failed} failed ({judged.describe()})"
    _fail(case, judged.status, detail)


def numeric_variance(cases: list[Case]) -> None:
    """A server's audio alone: requests identical alone that differ in compositions are
    `batch-dependent`; where seeded requests do so too, no seed can explain it (their random stream
    is their own), so every such difference is `numeric-batch-variance`: the server's arithmetic
    follows the batch. Relabels `cases` in place."""
    differing = [c for c in cases if not c.alone and c.attribution and c.attribution.cause in NUMERIC_CAUSES]
    seeded = sorted({c.request for c in differing if c.seed_source == SeedSource.REQUEST})
    if not seeded:
        return
    for case in differing:
        if case.attribution.cause == BATCH_DEPENDENT:
            case.attribution = Attribution(
                NUMERIC_BATCH_VARIANCE,
                f"{case.attribution.detail}; seeded requests ({', '.join(seeded)}) differ in compositions too, "
                "so no seed explains it: the server's arithmetic depends on the batch",
            )


def another_requests_audio(mixup: MixUp) -> bool:
    """Whether a mix-up is a failure: found by the audio (the server reports no codes), among
    requests that differ in what the talker reads or the voice it clones. Otherwise (identical
    codes; only seeds or sampling differ) it is a warning: a model may ignore the difference."""
    return mixup.by_audio and bool(mixup.strangers)


def mixed_up(scenario: str, run: str, mixups: list[MixUp], outputs: dict[str, Outcome], rules: Rules) -> list[Case]:
    """A failing case for each response of one run that has the audio of its mix-up's first
    request (see another_requests_audio), compared with that request's response in the same run."""
    cases = []
    for m in filter(another_requests_audio, mixups):
        first = m.members[0]
        for key, fields in m.strangers.items():
            cmp = compare(outputs[first], outputs[key], rules.sample_rate)
            how = "identical PCM" if cmp.pcm_equal else f"SNR {format_db(cmp.snr_db)} dB >= {rules.min_snr_db:g} dB"
            detail = (
                f"the same audio as request {first!r} in {scenario}/{run} ({how}), although the two differ in "
                f"{', '.join(fields)}: one of the two responses carries the other request's audio"
            )
            case = Case(scenario, run, key, outputs[key].seed_source, "pass", cmp, other=first)
            cases.append(_fail(case, AUDIO_OF_ANOTHER_REQUEST, detail))
    return cases


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


def _verdict(cases: list[Case]) -> dict:
    """The verdict over some comparisons (the first of VERDICTS that any of them shows, else
    `identical`), every cause seen, the detail of the comparison that decided it, and whether none
    of them failed (`passed`: a verdict may be a warning, e.g. the same speech)."""
    found: dict[str, Case] = {}
    for case in cases:
        if case.attribution is not None and case.verdict != "pass":
            cause = case.attribution.cause
            if case.verdict == SAME_SPEECH:
                cause = NUMERIC_BATCH_VARIANCE
            found.setdefault(BATCH_DEPENDENT if cause in BATCH_CAUSES else cause, case)
    causes = [v for v in VERDICTS if v in found]
    first = found[causes[0]] if causes else None
    return {
        "verdict": causes[0] if causes else IDENTICAL,
        "passed": not any(c.failed for c in cases),
        "verdicts": causes,
        "cause": first.attribution.cause if first else None,
        "detail": first.attribution.detail if first else "identical in every comparison",
        "where": f"{first.scenario}/{first.run}" if first else None,
    }


def request_verdicts(cases: list[Case], requests: list[str]) -> dict[str, dict]:
    """Each request's verdict over all its comparisons."""
    by_request: dict[str, list[Case]] = {key: [] for key in requests}
    for case in cases:
        by_request[case.request].append(case)
    return {key: _verdict(mine) for key, mine in by_request.items()}


def path_verdicts(
    cases: list[Case],
    paths: dict[str, str | None],
    chosen: tuple[str, ...],
    skipped: dict[str, str],
    questions: Callable[[list[Case], list[str]], dict],
    not_run: dict[str, str] | None = None,
) -> dict[str, dict]:
    """Each server path's verdict over the comparisons of what it answered, with the requests that
    failed on it (`failed`: request -> its first cause there; `passed`: none did, None where nothing
    went this way). An unseeded request's audio on any
    path is compared with it alone, and that with the deploy seed's audio by its seed probe (on the
    single route): a probe that fails counts on every path that answered the request. `paths`:
    path -> the scenario that audits it (None: the single route, which the others use); `chosen`:
    the scenarios run; `skipped`: scenario -> why the server could not be given it; `questions`:
    the two questions answered over a path's comparisons and requests (questions.answer); `not_run`:
    scenario -> why an audit that stopped partway never ran it."""
    probes = [
        c
        for c in cases
        if c.scenario == "seeds" and c.failed and c.attribution and c.attribution.cause == DEPLOY_SEED_NOT_APPLIED
    ]
    out = {}
    for path, scenario in paths.items():
        mine = [c for c in cases if c.path == path]
        if not mine:
            if scenario in skipped:
                verdict, detail = "skipped", skipped[scenario]
            elif scenario in (not_run or {}):
                verdict, detail = "not audited", (not_run or {})[scenario]
            elif scenario is not None and scenario not in chosen:
                verdict, detail = "not audited", f"the {scenario} scenario was not chosen (--scenarios)"
            else:
                verdict, detail = "not audited", "no audited request could be sent this way"
            out[path] = {"verdict": verdict, "verdicts": [], "cause": None, "detail": detail, "where": None}
            out[path].update(passed=None, requests=0, comparisons=0, failed={}, questions=None)
            continue
        answered = {c.request for c in mine}
        mine += [probe for probe in probes if probe.request in answered and probe.path != path]
        failed: dict[str, str] = {}
        for c in mine:
            if c.failed and c.attribution is not None:
                failed.setdefault(c.request, c.attribution.cause)
        counts = {"requests": len(answered), "comparisons": len(mine)}
        out[path] = {**_verdict(mine), "passed": not failed, **counts, "failed": failed}
        out[path]["questions"] = answers = questions(mine, sorted(answered))
        words = answers["numerics"].get("words") or {}  # --asr-model: its corpus error rate under load
        if words.get("passed") is False and out[path]["passed"]:
            out[path].update(passed=False, verdict=DIFFERENT_WORDS, detail=answers["numerics"]["line"])
    return out
