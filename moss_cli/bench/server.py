"""`moss bench --server URL`: the cost of determinism on a live speech server, with every response
checked under load.

Every request goes along one serving path (`remote.paths`; `--path`): the single route, raw audio
chunks (the default) or the WebSocket stream, an utterance per request on a session of its own.
First it learns what the server needs (`remote.session`: the deploy seed, the request set, a reference
voice: vllm-omni's MOSS-TTS-Local refuses a request without one) and sends every request of every arm
alone, one at a time: the references.
After a warm-up it sweeps the concurrency levels; at each level every round runs each arm in turn
(the order rotating from round to round, so a drifting machine hits every arm alike) over the same
sequence of requests, at that concurrency, closed loop or Poisson arrivals. Every response's PCM is
compared with its request's reference (bitwise, or at `--level waveform` by SNR): one that differs
is named with its concurrency, arm and the neighbours that were in flight with it. The figures
(bench/figures.py) per arm and level, and each arm's over the unseeded arm's, make the cost table.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import __version__, speech_api
from ..audit.compare import compare
from ..audit.verdicts import unseeded_causes
from ..config.effective import SeedSource
from ..config.requests import Request
from ..errors import MossError
from ..measures import AUDIO_LEVELS, check_level, check_speech, judgement
from ..measures.judgement import DIFFERENT_SPEECH, DIFFERENT_WORDS, IDENTICAL, SAME_SPEECH, WITHIN_SNR
from ..measures.speech import SpeechThresholds
from ..measures.words import Score, WordOptions, corpus, corpus_text, paired_levels
from ..remote import paths
from ..remote.client import Retry, ServerError, SpeechClient
from ..remote.paths import RAW_STREAM, SINGLE, ServingPath
from ..remote.reply import Reply
from ..remote.session import ServerSession
from ..remote.settings import ServerOptions
from ..remote.speech_stream import StreamUnavailable
from ..report.page import MAX_PLOTTED_PAIRS
from ..speech_api import body_from_request
from .arms import arm_seed, check_deploy_seed, must_hold
from .figures import figures, ratios
from .load import Load, Sent, drive, name_neighbours, timing

# A response's check: the judgement's status (measures.judgement: identical, within-snr and same-speech
# pass; different-speech and different-words fail), where it fails the level without a speech judgement
# `varied` (a failure) or `varied-unseeded` (reported), and `failed` where no audio came.
VARIED, VARIED_UNSEEDED, FAILED = "varied", "varied-unseeded", "failed"
CHECKS = (IDENTICAL, WITHIN_SNR, SAME_SPEECH, VARIED, VARIED_UNSEEDED, DIFFERENT_SPEECH, DIFFERENT_WORDS, FAILED)
DIFFERING = (VARIED, VARIED_UNSEEDED, DIFFERENT_SPEECH, DIFFERENT_WORDS)  # what a report lists, and plots


@dataclass(frozen=True)
class ServerBenchOptions:
    server: ServerOptions
    concurrency: tuple[int, ...] = (1, 8)
    arms: tuple[str, ...] = ("unseeded", "seeded")
    num_requests: int | None = None  # per arm, level and round; None: 2 x the level, at least the set
    duration_s: float | None = None  # instead of a count: seconds of sending per arm, level and round
    request_rate: float = math.inf  # Poisson arrivals per second; inf: closed loop
    warmup: int = 2
    repeats: int = 1  # rounds per level
    deploy: Path | None = None  # the deploy file the server runs: its stage-0 seed
    allow_foreign_deploy: bool = False
    level: str = "bitwise"  # bitwise | waveform | speech
    speech: SpeechThresholds = field(default_factory=SpeechThresholds)  # --level speech: what the same speech is
    words: WordOptions | None = None  # --level speech with --asr-model: the words are heard too
    min_snr_db: float = 60.0
    path: str = RAW_STREAM.name  # the serving path every request goes along (one of remote.paths.benched())
    frames: int | None = None  # every request's max_new_tokens (None: the requests' own)
    requests: Path | None = None  # a request file (None: the audit's built-in set)
    allow_dropped_fields: bool = False
    allow_unseeded: bool = (
        False  # unseeded responses that vary are reported, not failures, if the deploy seed is unknown
    )

    def __post_init__(self) -> None:
        if self.path not in paths.benched():
            raise MossError(f"expected one of {', '.join(paths.benched())}, got {self.path!r}", field="--path")
        if self.serving_path is RAW_STREAM and self.server.response_format not in paths.STREAMED_FORMATS:
            raise MossError(
                f"a streamed answer is {' or '.join(paths.STREAMED_FORMATS)} (vllm-omni streams no other format), "
                f"got {self.server.response_format}; or pass --no-stream",
                field="--response-format",
            )
        check_speech(check_level(self.level, AUDIO_LEVELS), self.words)
        if self.num_requests is not None and self.duration_s is not None:
            raise MossError("give a count (--num-requests) or a duration (--duration), not both", field="--duration")
        if self.duration_s is not None and not self.duration_s > 0:
            raise MossError(f"must be > 0, got {self.duration_s}", field="--duration")
        if not self.request_rate > 0:
            raise MossError(f"must be > 0 (inf: back to back), got {self.request_rate}", field="--request-rate")

    @property
    def tolerances(self) -> judgement.Tolerances:
        return judgement.Tolerances(self.min_snr_db, self.speech, self.words)

    @property
    def serving_path(self) -> ServingPath:
        return paths.PATHS[self.path]

    def count(self, concurrency: int, requests: int) -> int | None:
        if self.duration_s is not None:
            return None
        return self.num_requests if self.num_requests is not None else max(requests, 2 * concurrency)


@dataclass
class Checked:
    """One response under load and its check against the same request alone."""

    arm: str
    concurrency: int
    round: int
    index: int
    request: str
    sent_s: float
    done_s: float
    check: str
    latency_s: float | None = None
    audio_ttfp_s: float | None = None
    audio_duration_s: float | None = None
    audio_frames: int | None = None
    audio_rtf: float | None = None
    audio_underrun_s: float | None = None
    audio_continuity_ok: bool | None = None
    in_flight_client: int | None = None
    in_flight_server: int | None = None  # moss serve's x-moss-max-in-flight
    attempts: int | None = None
    server_request_id: str | None = None
    error: str | None = None
    comparison: dict | None = None
    speech: dict | None = None  # --level speech: the speech measures against its request alone
    words: dict | None = None  # --level speech with --asr-model: the words heard, against its request alone
    # --asr-model: its transcript's errors against the request's text, and its request alone's (errors_alone)
    wer: dict | None = None
    neighbours: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.request}#{self.index}"

    @property
    def where(self) -> str:
        return f"concurrency {self.concurrency}, arm {self.arm}, round {self.round + 1}"

    def as_dict(self) -> dict:
        return {"label": self.label, **dataclasses.asdict(self)}


@dataclass
class ServerBenchReport:
    setup: dict
    results: list[dict]  # one per arm and concurrency: vllm-omni's figures, the rounds', the checks
    over_unseeded: dict[str, dict[str, dict[str, list[float]]]]  # arm -> concurrency -> figure -> [median, min, max]
    responses: list[Checked]
    references: dict[tuple[str, str], Reply]  # (arm, request id) -> its answer alone
    kept: dict[int, Reply]  # id(Checked) -> its answer, for the first responses that varied (the page's pairs)
    retries: list[dict]

    @property
    def failures(self) -> list[Checked]:
        return [c for c in self.responses if c.check in (VARIED, DIFFERENT_SPEECH, DIFFERENT_WORDS, FAILED)]

    def words_failures(self) -> list[str]:
        """--asr-model: the arms and concurrencies whose error rate under load rose above the tolerance (the
        95% interval of its difference from alone lies above it)."""
        out = []
        for r in self.results:
            w = r.get("words") or {}
            if w.get("passed") is False:
                out.append(corpus_text(w, f" at concurrency {r['max_concurrency']}, arm {r['arm']}"))
        return out

    def words_lines(self) -> list[str]:
        """What the words say, for people: each failing corpus, and the normalizer and model used."""
        words = [r["words"] for r in self.results if r.get("words")]
        if self.setup["level"] == "speech" and self.setup.get("asr_model") is None:
            return [f"At --level speech {judgement.WORDS_UNCHECKED}."]
        if not words:
            return []
        model = self.setup.get("asr_model")
        spent = self.setup["asr_seconds"]
        return self.words_failures() + [
            f"words heard by {model}, normalized by {words[0]['normalizer']}; ASR {spent:.1f} s"
        ]

    @property
    def passed(self) -> bool:
        return not self.failures and not self.words_failures()

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def unseeded_causes(self) -> str | None:
        """Why the unseeded responses that fail differ from their request alone (None: none does)."""
        n = sum(1 for c in self.failures if c.arm == "unseeded" and c.check == VARIED)
        if not n:
            return None
        why = self.setup["unseeded_causes"]
        return f"{n} unseeded response(s) differ from their request alone: not reproducible; {why}"

    def as_dict(self) -> dict:
        varied = [c for c in self.responses if c.check in DIFFERING]
        return {
            "setup": self.setup,
            "results": self.results,
            "over_unseeded": self.over_unseeded,
            "summary": {
                "passed": self.passed,
                "exit_code": self.exit_code,
                "responses": len(self.responses),
                "failed": [f"{c.label} ({c.where}): {c.error}" for c in self.responses if c.check == FAILED],
                "varied": [describe(c) for c in varied],
                "unseeded_causes": self.unseeded_causes(),
            },
            "retries": self.retries,
            "responses": [c.as_dict() for c in self.responses],
        }


def describe(c: Checked) -> str:
    """A response that differs from its request alone, for people."""
    others = ", ".join(c.neighbours) if c.neighbours else "none"
    if c.check == DIFFERENT_SPEECH:
        evidence = f"{c.speech['failed']} failed" if c.speech else "not judged"
        alone = f"{c.label} is not the same speech as the same request alone at {c.where} ({evidence})"
        return f"{alone}; in flight with it: {others}"
    if c.check == DIFFERENT_WORDS:
        lost = ", ".join(repr(a["word"]) for a in c.words["accused"])
        heard = c.words["transcripts"][1]
        alone = f"{c.label} lost words the same request said alone at {c.where} ({lost}; heard {heard!r})"
        return f"{alone}; in flight with it: {others}"
    failing = "" if c.check == VARIED else " (unseeded, its deploy seed unknown: reported, --allow-unseeded)"
    return f"{c.label} differs from the same request alone at {c.where}{failing}; in flight with it: {others}"


@dataclass
class Sweep:
    """What every arm's run at every concurrency shares: the client, each arm's bodies (one per request), the
    answers alone they are checked against, whether the deploy seed is known (unseeded responses must hold),
    the answers kept for the page's pairs, and what to call as each request ends."""

    client: SpeechClient
    bodies: dict[str, list[dict]]  # arm -> a body per request
    references: dict[tuple[str, str], Reply]  # (arm, request id) -> its answer alone
    deploy_known: bool
    kept: dict[int, Reply] = field(default_factory=dict)  # id(Checked) -> its answer
    on_sent: Callable[[str], None] = lambda label: None


class ServerBench:
    def __init__(self, options: ServerBenchOptions, on_retry: Callable[[Retry], None] | None = None) -> None:
        self.options = options
        self.on_retry = on_retry
        self.known = ServerSession.open(
            options.server,
            deploy_file=options.deploy,
            allow_foreign_deploy=options.allow_foreign_deploy,
            request_file=options.requests,
            allow_dropped_fields=options.allow_dropped_fields,
            check_deploy=lambda deploy: check_deploy_seed(
                options.arms, deploy.default_seed if deploy else None, options.deploy is not None
            ),
        )
        if options.frames is not None:
            self.known.requests = [dataclasses.replace(r, max_new_frames=options.frames) for r in self.known.requests]

    @property
    def requests(self) -> list[Request]:
        return self.known.requests

    @property
    def deploy_seed(self) -> int | None:
        return self.known.deploy_seed

    @property
    def total(self) -> int | None:
        """Requests the sweep sends (None: a duration per level)."""
        o = self.options
        counts = [o.count(c, len(self.requests)) for c in o.concurrency]
        return None if None in counts else sum(counts) * o.repeats * len(o.arms)

    def run(self, on_phase=None, on_sent=None) -> ServerBenchReport:
        """The sweep; `on_phase(text)` as each part starts, `on_sent(label)` as each request of the sweep ends."""
        return asyncio.run(self._run(on_phase or (lambda text: None), on_sent or (lambda label: None)))

    async def _run(self, on_phase, on_sent) -> ServerBenchReport:
        o = self.options
        server = dataclasses.replace(o.server, concurrency=max(o.concurrency))  # the levels set the in-flight count
        heard_s = judgement.asr_seconds(o.words)
        with tempfile.TemporaryDirectory(prefix="moss-bench-") as workdir:
            async with SpeechClient(server, self.on_retry) as client:
                await self.known.learn_voice(client, Path(workdir), "the built-in requests")
                bodies = {arm: [self._body(arm, r, i) for i, r in enumerate(self.requests)] for arm in o.arms}
                on_phase(f"references: {len(self.requests)} request(s) x {len(o.arms)} arm(s), each alone")
                references = await self._references(client, bodies)
                reported = (
                    [references[("unseeded", r.id)].seed_source for r in self.requests] if "unseeded" in o.arms else []
                )
                deploy_known = self.deploy_seed is not None or (
                    bool(reported) and all(s == SeedSource.DEPLOY for s in reported)
                )
                if o.warmup:
                    on_phase(f"warm-up: {o.warmup} request(s)")
                    arm, n = o.arms[0], len(self.requests)
                    warm = Load(max(o.concurrency), o.warmup)
                    send = o.serving_path.speak
                    await drive(warm, lambda i: send(client, "warm-up", bodies[arm][i % n], "warm-up"), ServerError)
                sweep = Sweep(client, bodies, references, deploy_known, on_sent=on_sent)
                responses, per_round = [], {}
                for concurrency in o.concurrency:
                    load = Load(concurrency, o.count(concurrency, len(self.requests)), o.duration_s, o.request_rate)
                    for round_ in range(o.repeats):
                        order = o.arms[round_ % len(o.arms) :] + o.arms[: round_ % len(o.arms)]
                        for arm in order:
                            on_phase(f"concurrency {concurrency}, round {round_ + 1}/{o.repeats}: {arm}")
                            checked, wall = await self._arm_under(load, sweep, arm, round_)
                            responses += checked
                            per_round.setdefault((arm, concurrency), []).append((checked, wall))
        results, over = self._figures(per_round)
        setup = {
            "server": server.public_url,
            "models": self.known.info.models,
            "model_sent": server.model,
            "served": self.known.info.environment,
            "response_format": server.response_format,
            "stream": o.serving_path.answers[1],
            "path": o.path,
            "route": o.serving_path.route,
            "arms": list(o.arms),
            "concurrency": list(o.concurrency),
            "num_requests": {str(c): o.count(c, len(self.requests)) for c in o.concurrency},
            "duration_s": o.duration_s,
            "request_rate": "inf" if math.isinf(o.request_rate) else o.request_rate,
            "arrivals": "closed loop" if math.isinf(o.request_rate) else f"Poisson, {o.request_rate:g} requests/s",
            "rounds": o.repeats,
            "warmup": o.warmup,
            "requests": [r.id for r in self.requests],
            "request_file": str(o.requests) if o.requests is not None else None,
            "dropped_fields": self.known.dropped,
            "level": o.level,
            "min_snr_db": o.min_snr_db if o.level == "waveform" else None,
            "asr_model": o.words.model if o.words else None,
            "asr_seconds": judgement.asr_seconds(o.words) - heard_s if o.words else None,
            "deploy": str(o.deploy) if o.deploy is not None else None,
            "deploy_seed": self.deploy_seed,
            "unseeded_must_hold": must_hold("unseeded", deploy_known, o.allow_unseeded),
            "allow_unseeded": o.allow_unseeded,
            "unseeded_causes": self._unseeded_causes(deploy_known),
            "reference_voice": self.known.voice_note,
            "timeout_s": server.timeout_s,
            "retries_allowed": server.retries,
            "http_requests": client.sent,
            "websocket_utterances": client.utterances,
            "client_moss_version": __version__,
            "client_python_version": platform.python_version(),
        }
        retries = [r.as_dict() for r in client.retries]
        return ServerBenchReport(setup, results, over, responses, references, sweep.kept, retries)

    async def _references(self, client: SpeechClient, bodies: dict[str, list[dict]]) -> dict[tuple[str, str], Reply]:
        """Every request of every arm sent alone, one at a time: what each response under load must match."""
        o, references = self.options, {}
        try:
            for arm in o.arms:
                for request, body in zip(self.requests, bodies[arm]):
                    references[(arm, request.id)] = await o.serving_path.speak(client, request.id, body, f"{arm}/alone")
        except StreamUnavailable as e:  # the path asked for by name: its absence is the error
            others = " or ".join(name for name in paths.benched() if name != o.path)
            raise MossError(
                f"{o.path}: the server does not serve {o.serving_path.refused} "
                f"({speech_api.STREAM_PATH}): {e.reason}; bench another path (--path {others})",
                field="--path",
            ) from None
        return references

    def _body(self, arm: str, request: Request, index: int) -> dict:
        seed = arm_seed(arm, request.seed, index, self.deploy_seed)
        o = self.options
        return body_from_request(
            request,
            model=o.server.model,
            response_format=o.server.response_format,
            seed=seed,
            with_seed=seed is not None,
        )

    def _unseeded_causes(self, deploy_known: bool) -> str:
        """Why an unseeded response may differ from its request alone on this server (a request sent
        whole, without a frame budget, may be retried with a random seed)."""
        retried = self.options.serving_path is SINGLE and any(r.max_new_frames is None for r in self.requests)
        causes = unseeded_causes(retried, deploy_known)
        return causes if deploy_known else f"{causes}; --allow-unseeded reports them instead of failing"

    async def _arm_under(self, load: Load, sweep: Sweep, arm: str, round_: int) -> tuple[list[Checked], float]:
        """One arm's run under `load` (its concurrency); every response checked against its request alone."""
        n = len(self.requests)
        context = f"{arm}/concurrency-{load.concurrency}/round-{round_ + 1}"

        async def send(index: int) -> Reply:
            label = f"{self.requests[index % n].id}#{index}"
            try:
                return await self.options.serving_path.speak(sweep.client, label, sweep.bodies[arm][index % n], context)
            finally:
                sweep.on_sent(label)

        sent, wall = await drive(load, send, ServerError)
        name_neighbours(sent, lambda s: f"{self.requests[s.index % n].id}#{s.index}")
        return [self._check(s, sweep, arm, load.concurrency, round_) for s in sent], wall

    def _check(self, s: Sent, sweep: Sweep, arm: str, concurrency: int, round_: int) -> Checked:
        request = self.requests[s.index % len(self.requests)]
        c = Checked(arm, concurrency, round_, s.index, request.id, round(s.start_s, 4), round(s.end_s, 4), FAILED)
        c.neighbours = s.neighbours
        if s.reply is None:
            c.error = s.error
            return c
        reply, reference, kept = s.reply, sweep.references[(arm, request.id)], sweep.kept
        t = timing(reply, self.options.serving_path.streamed)
        c.latency_s, c.audio_duration_s, c.audio_frames, c.audio_rtf = t.latency_s, t.audio_s, t.samples, t.rtf
        c.audio_ttfp_s, c.audio_underrun_s, c.audio_continuity_ok = t.ttfp_s, t.underrun_s, t.continuity_ok
        c.in_flight_client, c.in_flight_server, c.attempts = reply.in_flight, reply.server_in_flight, reply.attempts
        c.server_request_id = reply.server_id
        o = self.options
        language = request.prompt_fields.get("language")
        if o.words is not None and request.text:  # every response's words, for the corpus's error rates
            clips = (reference.pcm, reply.pcm, reference.sample_rate)
            alone, here = judgement.scores(clips, request.text, language, o.words)
            c.wer = {"errors": here.errors, "errors_alone": alone.errors, "tokens": here.tokens,
                     "transcript": here.transcript}  # fmt: skip
        if reply.pcm_sha256 == reference.pcm_sha256:
            c.check = IDENTICAL
            return c
        seed = arm_seed(arm, request.seed, s.index % len(self.requests), self.deploy_seed)
        cmp = compare(reference.outcome(request, seed), reply.outcome(request, seed), reference.sample_rate)
        c.comparison = cmp.as_dict()
        judged = judgement.judge(
            o.level, o.tolerances, pcm_equal=cmp.pcm_equal, codes_equal=None, snr_db=cmp.snr_db,
            clips=(reference.pcm, reply.pcm, reference.sample_rate), text=request.text, language=language,
        )  # fmt: skip
        c.speech = judged.speech.as_dict() if judged.speech else None
        c.words = judged.words.as_dict() if judged.words else None
        c.check = judged.status  # the same speech passes whatever the seed; other speech never does
        if judged.status == judgement.DIFFERS:
            c.check = VARIED if must_hold(arm, sweep.deploy_known, o.allow_unseeded) else VARIED_UNSEEDED
        if not judged.passed and len(kept) < MAX_PLOTTED_PAIRS:
            kept[id(c)] = reply
        return c

    def _figures(self, per_round: dict) -> tuple[list[dict], dict]:
        """vllm-omni's figures per arm and level (every round's responses together, and each round's),
        and each arm's cost figures over the unseeded arm's, round by round."""
        results, by_round = [], {}
        for (arm, level), rounds in per_round.items():
            pooled = [c for checked, _ in rounds for c in checked]
            whole = _figures_of(pooled, sum(wall for _, wall in rounds))
            each = [_figures_of(checked, wall) for checked, wall in rounds]
            by_round[(arm, level)] = each
            checks = {k: sum(1 for c in pooled if c.check == k) for k in CHECKS}
            words = self._words(pooled)
            rate = self.options.request_rate
            results.append(
                {
                    "arm": arm,
                    "max_concurrency": level,
                    "request_rate": "inf" if math.isinf(rate) else rate,
                    **whole,
                    "checks": checks,
                    **({"words": words} if words else {}),
                    "rounds": each,
                }
            )
        self._words_against_lowest(results, per_round)
        over: dict = {}
        for (arm, level), each in by_round.items():
            if arm != "unseeded" and ("unseeded", level) in by_round:
                over.setdefault(arm, {})[str(level)] = ratios(each, by_round[("unseeded", level)])
        return results, over

    def _words(self, checked: list[Checked]) -> dict | None:
        """--asr-model: the corpus error rate of these responses alone and under load (measures.words.corpus)."""
        scored = [c.wer for c in checked if c.wer is not None]
        if not scored or self.options.words is None:
            return None
        pairs = [(Score("", w["errors_alone"], w["tokens"]), Score(w["transcript"], w["errors"], w["tokens"]))
                 for w in scored]  # fmt: skip
        return {**corpus(pairs, self.options.words.max_wer_increase), "normalizer": self.options.words.normalizer}

    def _words_against_lowest(self, results: list[dict], per_round: dict) -> None:
        """Each arm's error rate at each concurrency minus at its lowest (concurrency 1 where it was run),
        paired by request, with its interval: where quality starts to fall."""
        rates: dict[tuple[str, int], dict[str, list[float]]] = {}
        for (arm, level), rounds in per_round.items():
            for checked, _ in rounds:
                for c in checked:
                    if c.wer is not None and c.wer["tokens"]:
                        rates.setdefault((arm, level), {}).setdefault(c.request, []).append(
                            c.wer["errors"] / c.wer["tokens"]
                        )
        for r in results:
            lowest = min(level for arm, level in rates if arm == r["arm"]) if "words" in r else None
            if lowest is not None and (r["arm"], r["max_concurrency"]) in rates:
                here, base = rates[(r["arm"], r["max_concurrency"])], rates[(r["arm"], lowest)]
                r["words"]["against_lowest"] = {"concurrency": lowest, **paired_levels(here, base)}


def _figures_of(checked: list[Checked], wall: float) -> dict:
    done = [c for c in checked if c.check != FAILED]
    samples = {
        "e2el": [c.latency_s for c in done],
        "audio_ttfp": [c.audio_ttfp_s for c in done if c.audio_ttfp_s is not None],
        "audio_rtf": [c.audio_rtf for c in done],
        "audio_duration": [c.audio_duration_s for c in done],
        "audio_underrun": [c.audio_underrun_s for c in done if c.audio_underrun_s is not None],
        "audio_frames": [c.audio_frames for c in done],
        "audio_continuity_ok": [c.audio_continuity_ok for c in done if c.audio_continuity_ok is not None],
    }
    most = max((c.in_flight_client or 0 for c in done), default=0)
    return figures(samples, len(done), len(checked) - len(done), wall, most)
