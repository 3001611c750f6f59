"""The audit's runs sent to a live speech server: a black box that decides its own batches, so a
run's members go one at a time (alone) or in flight together (up to --concurrency, late ones some
milliseconds apart), and the audit judges from the audio (plus `moss serve`'s `x-moss-*`
headers, when sent). Before the reference it learns what the server requires (a reference
voice: vllm-omni's MOSS-TTS-Local refuses requests without one); before a run that needs reference
audio, a stream or the batch route it checks that the server takes them, and skips the scenario
(reported) where it does not. A batch run sends its items in one call of the batch route while its
other members go as single requests at the same time. The report's `server` section says where it
ran, how many requests really were in flight together, the seed probes, any re-sends."""

from __future__ import annotations

import asyncio
import dataclasses
import platform
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from .. import __version__
from ..config.effective import SeedSource
from ..config.requests import Request
from ..io.outcome import Outcome
from ..remote import paths
from ..remote.client import SpeechClient, all_or_nothing
from ..remote.reply import Reply
from ..remote.request_file import reference_sha256
from ..remote.session import ServerSession
from ..remote.speech_stream import SpeechStream
from ..remote.voice import with_voice
from ..speech_api import (
    BATCH_PATH,
    STREAM_PATH,
    batch_item_lacks,
    body_from_request,
    session_config,
    session_lacks,
)
from .attribution import Attribution
from .scenarios import (
    BATCH_MAX_ITEMS,
    DEPLOY_SEED_PROBE,
    Member,
    Run,
    Skipped,
    Target,
    neighbour_requests,
    voice_neighbour_requests,
)
from .verdicts import DEPLOY_HINT, GLOBAL_STREAM, RNG_COUPLING, Attribute, Rules

if TYPE_CHECKING:
    from .options import AuditOptions


def greedy(request: Request, honoured: bool) -> bool:
    """audio_temperature 0, on a server that honours it (moss serve; vllm-omni drops the field and
    samples): decoding ignores any seed, so seed probes would prove nothing."""
    return honoured and request.sampling.get("audio_temperature") == 0


def served_content(request: Request, seed: int | None, greedy_ids: set[str]) -> dict:
    """What should shape a request's audio (as mixups.request_content, from the request itself)."""
    return {
        "text": request.text,
        "prompt fields": request.prompt_fields,
        "ref_text": request.ref_text,
        "ref_audio": reference_sha256(request),
        "seed": None if request.id in greedy_ids else seed,
        "sampling": request.sampling,
    }


class ServerExecutor:
    def __init__(self, options: AuditOptions) -> None:
        self.options = options
        self.server = options.server
        self.known = ServerSession.open(
            options.server,
            deploy_file=options.synth.deploy,
            allow_foreign_deploy=options.synth.allow_foreign_deploy,
            request_file=options.requests,
            allow_dropped_fields=options.allow_dropped_fields,
        )
        self.target = Target(server=True, concurrency=self.server.concurrency)
        self.sample_rate = 0  # known from the first answer
        self.chunk_schedule: list[int] = []
        self.greedy: set[str] = set()
        self.stagger_s = options.stagger_s
        self.runs: dict[str, dict] = {}  # "scenario/run" -> who was in flight together
        self.probes: dict[str, list[str]] = {}
        self._replies: dict[tuple[int, str], Reply] = {}
        self._checked: dict[str, str | None] = {}  # "ref_audio" or a path -> why the server refuses it (None: takes it)
        self.reference_replies: list[Reply] = []
        self.reported_seeds: dict[str, int] = {}  # no --deploy: the deploy seed the server reports per request

    @property
    def deploy_seed(self) -> int | None:
        return self.known.deploy_seed

    @property
    def audited(self) -> list[Request]:
        return self.known.requests

    @contextmanager
    def session(self, workdir: Path) -> Iterator[ServerExecutor]:
        self.workdir = workdir
        self._loop = asyncio.new_event_loop()
        self.client = SpeechClient(self.server, self.options.on_retry)
        try:
            self._loop.run_until_complete(self.client.__aenter__())
            self._loop.run_until_complete(self.known.learn_voice(self.client, workdir, "the audit's own requests"))
            self.target = dataclasses.replace(self.target, voice=self.known.voice)
            yield self
        finally:
            self._loop.run_until_complete(self.client.__aexit__(None, None, None))
            self._loop.close()

    def _body(self, member: Member) -> dict:
        """A member's single body; its path marks it as it is sent (`remote.paths`)."""
        return body_from_request(
            member.request, model=self.server.model, response_format=self.server.response_format, seed=member.seed
        )

    def execute(self, runs: list[Run]) -> Iterator[dict[str, Outcome] | Skipped]:
        for run in runs:
            needs = (["ref_audio"] if run.needs_voice else []) + [path.name for path in run.paths]
            refused = next((why for why in map(self._refuses, needs) if why), None)
            if refused:
                yield Skipped(refused)
                continue
            yield self._loop.run_until_complete(self._send(run))

    def _refuses(self, needs: str) -> str | None:
        """The server's words when it refuses what a run needs, reference audio or a path (its check
        before use: one short request sent that way), else None."""
        if needs not in self._checked:
            if needs == "ref_audio":
                check = Member(voice_neighbour_requests(1, self.workdir)[0], audited=False)
            else:
                neighbour = neighbour_requests(1, f"neighbour-{needs}", seed_base=4000, frames=[4], greedy=False)
                check = Member(with_voice(neighbour, self.target.voice)[0], audited=False, path=paths.PATHS[needs])
            what = "reference audio" if needs == "ref_audio" else None
            refusal = check.path.refusal(self.client, check.key, self._body(check), f"{needs}/check", what)
            self._checked[needs] = self._loop.run_until_complete(refusal)
        return self._checked[needs]

    async def _send(self, run: Run) -> dict[str, Outcome]:
        context, started = run.name, time.perf_counter()

        async def one(member: Member, delay: float) -> list[tuple[Member, Reply]]:
            await asyncio.sleep(delay)
            return [(member, await member.path.speak(self.client, member.key, self._body(member), context, started))]

        async def batch(items: list[Member]) -> list[tuple[Member, Reply]]:
            bodies = [self._body(m) for m in items]
            replies = await items[0].path.speak_items(self.client, [m.key for m in items], bodies, context, started)
            return list(zip(items, replies))

        if run.one_connection:  # every utterance in turn on one WebSocket session
            first, _ = session_config(self._body(run.members[0]))
            async with SpeechStream(self.server, first, context) as stream:
                got = [(m, await paths.utter(self.client, stream, m.key, self._body(m), started)) for m in run.members]
        elif run.alone:
            got = [pair for m in run.members for pair in await (batch([m]) if m.batched else one(m, 0.0))]
        else:
            stagger = self.stagger_s or 0.0  # members that are not late go at once
            items = [m for m in run.members if m.batched]
            calls = [batch(items[i : i + BATCH_MAX_ITEMS]) for i in range(0, len(items), BATCH_MAX_ITEMS)]
            singles = [one(m, m.late * stagger) for m in run.members if not m.batched]
            answered = {m.key: reply for pairs in await all_or_nothing(calls + singles) for m, reply in pairs}
            got = [(m, answered[m.key]) for m in run.members]
        if run.scenario == "reference":
            self._learn(got, time.perf_counter() - started)
        self.runs[run.name] = _in_flight(run, got, self.stagger_s)
        for member, reply in got:
            self._replies[(id(run), member.key)] = reply
        if run.scenario == "seeds":
            self.probes[run.name] = [m.key for m in run.members]
        return {m.key: self._output(m, r) for m, r in got if m.audited}

    def _learn(self, got: list[tuple[Member, Reply]], elapsed: float) -> None:
        """What the reference's answers tell: the rate, the seeds the server reports, whether it
        honours greedy decoding, and (unless given) how far apart staggered sends go."""
        self.sample_rate = got[0][1].sample_rate
        self.reference_replies = [r for _, r in got]
        honoured = all(r.seed_source is not None for _, r in got)  # moss serve says what it did
        self.greedy = {m.key for m, _ in got if greedy(m.request, honoured)}
        if self.stagger_s is None:  # sends must overlap for "staggered" to mean anything, on a fast server too
            self.stagger_s = min(max(elapsed / len(got) / 4, 0.005), 1.0)

    def _output(self, member: Member, reply: Reply) -> Outcome:
        """An answer as the audit keeps it: no codes, only what the server reported about them."""
        return reply.outcome(
            member.request, member.sent_seed, served_content(member.request, member.sent_seed, self.greedy)
        )

    @property
    def global_stream(self) -> bool:
        """Whether the server says its draws come from one global stream (`moss serve --legacy-global-rng`
        reports it in its environment)."""
        return bool((self.known.info.environment or {}).get("legacy_global_rng"))

    def rules(self, options: AuditOptions, reference: dict[str, Outcome]) -> Rules:
        greedy = frozenset(self.greedy)
        return Rules.of(
            options, self.sample_rate, server=True, deploy_seed=self.deploy_seed, greedy=greedy,
            global_stream=self.global_stream,
        )  # fmt: skip

    def deploy_seeds(self, reference: dict[str, Outcome]) -> dict[str, int | None]:
        """From --deploy, else as the server reports it for each request."""
        if self.deploy_seed is not None:
            return {key: self.deploy_seed for key in reference}
        seeds = {key: out.seed if out.seed_source == SeedSource.DEPLOY else None for key, out in reference.items()}
        self.reported_seeds = {key: seed for key, seed in seeds.items() if seed is not None}
        return seeds

    def evidence(self, run: Run, key: str) -> str:
        reply = self._replies.get((id(run), key))
        if run.alone or reply is None:
            return ""
        if reply.server_in_flight is not None:
            return f" ({reply.server_in_flight} requests in flight together, by the server's count)"
        return f" ({reply.in_flight} requests in flight together, as this audit sent them)"

    def attribution(self, reference_run: Run, run: Run, key: str) -> Attribute | None:
        """A server cannot be replayed: its audio alone tells, unless it says its draws come from one
        global stream (`moss serve --legacy-global-rng` reports it in its environment), which
        explains any difference in a composition: the random stream depends on the batch."""
        if not self.global_stream:
            return None
        where = f"{run.name}{self.evidence(run, key)}"
        return lambda cmp: Attribution(
            RNG_COUPLING,
            f"identical in two runs alone, different in {where}: {GLOBAL_STREAM}, so its draws depend on the batch",
        )

    def environment(self) -> dict:
        """The server's own account of its engine where it gives one (`moss serve`: the fields of a
        local run's environment, so baselines of both kinds compare field by field), then what this
        client knows: the address, the models listed, the format asked for, its own versions."""
        return {
            **(self.known.info.environment or {}),
            "server": self.server.public_url,
            "models": self.known.info.models,
            "response_format": self.server.response_format,
            "client_moss_version": __version__,
            "client_python_version": platform.python_version(),
        }

    def report(self, verdicts: dict[str, dict]) -> dict:
        server = self.server
        return {
            "url": server.public_url,
            "models": self.known.info.models,
            "model_sent": server.model,
            "response_format": server.response_format,
            "concurrency": server.concurrency,
            "stagger_s": round(self.stagger_s or 0.0, 4),
            "stagger": "given" if self.options.stagger_s is not None else "auto: a quarter of a request's time alone",
            "timeout_s": server.timeout_s,
            "retries_allowed": server.retries,
            "codes": "x-moss-codes-sha256 header"
            if all(r.codes_sha256 for r in self.reference_replies)
            else "unknown: the server sends no codes hash (level codes: identical audio stands for identical codes)",
            "http_requests": self.client.sent,
            "websocket_utterances": self.client.utterances,
            "retries": [r.as_dict() for r in self.client.retries],
            "deploy_seed": self._deploy_note(),
            "reference_voice": self.known.voice_note,
            "dropped_fields": self.known.dropped,
            "batch_items": self._batch_note(),
            paths.WEBSOCKET.name: self._websocket_note(),
            "probes": self.probes,
            "requests": verdicts,
            "runs": self.runs,
        }

    def _batch_note(self) -> dict:
        """Which audited requests the batch route was given as items, and why the others went as
        single requests next to them (a vllm-omni batch item has no seed and no extra fields)."""
        return self._carried(BATCH_PATH, "items", batch_item_lacks, "a batch item")

    def _websocket_note(self) -> dict:
        """Which audited requests went as utterances of the WebSocket stream, and why the others went
        as single requests next to its sessions (a session.config has no sampling fields or
        extra_params; the handler strips the text)."""
        return self._carried(STREAM_PATH, "utterances", session_lacks, "an utterance")

    def _carried(self, route: str, carried_as: str, lacks: Callable[[Request], list[str]], one: str) -> dict:
        missing = {r.id: lacks(r) for r in self.audited}
        return {
            "path": route,
            carried_as: [key for key, fields in missing.items() if not fields],
            paths.SINGLE.name: {
                key: f"{one} cannot carry {', '.join(fields)}" for key, fields in missing.items() if fields
            },
        }

    def _deploy_note(self) -> dict:
        """What the audit knows of the seed unseeded requests must get, for the reports."""
        probe = next((run for run in self.probes if run.endswith(DEPLOY_SEED_PROBE)), None)
        if self.known.deploy is None and self.reported_seeds and probe is not None:
            seeds = sorted(set(self.reported_seeds.values()))
            note = (
                f"checked against the seed the server reports ({', '.join(map(str, seeds))}), not a deploy file: "
                f"each of the {len(self.probes[probe])} unseeded requests it reports that seed for was sent with it "
                f"explicitly and compared with itself sent without ({probe}); pass --deploy FILE (the deploy file the "
                "server runs) to check the seed the file itself gives"
            )
            return {"file": None, "seed": seeds[0] if len(seeds) == 1 else None, "checked": "reported", "note": note}
        if self.known.deploy is None:
            return {"file": None, "seed": None, "checked": False, "note": f"not checked: {DEPLOY_HINT}"}
        seed = self.deploy_seed
        note = (
            f"checked: every unseeded request must give the audio of the same request sent with seed {seed}"
            if seed is not None
            else "the deploy file gives no stage-0 seed: unseeded requests are not expected to be reproducible"
        )
        return {"file": str(self.options.synth.deploy), "seed": seed, "checked": seed is not None, "note": note}

    def compile_s(self) -> None:
        return None


def _in_flight(run: Run, got: list[tuple[Member, Reply]], stagger_s: float | None) -> dict:
    """How many requests really were in flight together: this client's count, and the server's
    own (x-moss-max-in-flight) where it reports one."""
    server_counts = [r.server_in_flight for _, r in got if r.server_in_flight is not None]
    staggered = any(m.late for m in run.members)
    return {
        "together": not run.alone,
        "stagger_s": round(stagger_s or 0.0, 4) if staggered else 0.0,
        "sent": len(got),
        "max_in_flight_client": max((r.in_flight for _, r in got), default=0),
        "max_in_flight_server": max(server_counts) if server_counts else None,
        "requests": {
            m.key: {
                "in_flight_client": r.in_flight,
                "in_flight_server": r.server_in_flight,
                "sent_s": round(r.sent_s, 4),
                "wall_s": round(r.wall_s, 4),
                "attempts": r.attempts,
                "server_request_id": r.server_id,
            }
            for m, r in got
            if m.audited
        },
    }
