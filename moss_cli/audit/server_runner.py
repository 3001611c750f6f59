"""Auditing a live server: send the same requests alone, again, and in compositions made with
concurrency and timing, then judge each against its reference (server_verdicts.py). The result is
the local audit's `AuditResult` (same cases, comparisons and reports) plus a `server` section:
where it ran, how many requests were really in flight together, the seed probes, any re-sends."""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import __version__
from ..config.deploy import load_deploy
from ..config.requests import Request
from ..errors import MossError
from ..remote.client import Retry, ServerError, SpeechClient, all_or_nothing
from ..remote.reply import Reply, audio_tensor
from ..remote.request_file import read_for_server, reference_sha256
from ..remote.settings import ServerOptions
from .builtin import builtin_requests
from .compare import Output
from .mixups import MixUpLog
from .runner import LEVELS, AuditOptions, AuditResult
from .server_scenarios import (
    SERVER_SCENARIOS,
    Send,
    ServerRun,
    build_server_runs,
    default_voice,
    greedy,
    seed_probes,
    stream_check,
    voice_check,
    with_voice,
)
from .server_verdicts import DEPLOY_HINT, Rules, alone, judge, request_verdicts


@dataclass
class ServerAuditOptions:
    server: ServerOptions
    requests: Path | None = None
    scenarios: tuple[str, ...] = SERVER_SCENARIOS
    level: str = "codes"
    min_snr_db: float = 60.0
    strict_unseeded: bool = False
    stagger_s: float | None = None  # None: a quarter of a request's time alone (measured by the reference run)
    deploy: Path | None = None  # the deploy file the server runs: its stage-0 seed is checked
    allow_foreign_deploy: bool = False
    allow_dropped_fields: bool = False  # send fields vllm-omni drops (a warning instead of exit 2)
    on_retry: Callable[[Retry], None] | None = field(default=None, repr=False)
    command: str | None = None  # the command line, as the reports show it (secrets already blanked)


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


def served_output(send: Send, reply: Reply, greedy_ids: set[str]) -> Output:
    """An answer as the audit keeps it: no codes, only what the server reported about them."""
    seed = send.sent_seed
    source = reply.seed_source or ("request" if seed is not None else "unknown")
    return Output(
        codes=None,
        audio=audio_tensor(reply.pcm),
        pcm_sha256=reply.pcm_sha256,
        seed_source=source,
        seed=reply.seed if reply.seed is not None else seed,
        wall_s=reply.wall_s,
        content=served_content(send.request, seed, greedy_ids),
        codes_hash=reply.codes_sha256,
        frame_count=reply.frames,
    )


def _evidence(reply: Reply) -> str:
    if reply.server_in_flight is not None:
        return f" ({reply.server_in_flight} requests in flight together, by the server's count)"
    return f" ({reply.in_flight} requests in flight together, as this audit sent them)"


class ServerAuditor:
    def __init__(self, options: ServerAuditOptions) -> None:
        if options.level not in LEVELS:
            raise MossError(f"unknown level {options.level!r}; expected one of {', '.join(LEVELS)}", field="--level")
        unknown = [s for s in options.scenarios if s not in SERVER_SCENARIOS]
        if unknown:
            raise MossError(
                f"unknown scenario(s) {', '.join(unknown)} for a server audit; "
                f"choose from {', '.join(SERVER_SCENARIOS)}",
                field="--scenarios",
            )
        self.options = options
        self.deploy = None
        if options.deploy is not None:  # its platform sections for CUDA, where vllm-omni serves
            self.deploy = load_deploy(options.deploy, "cuda", allow_foreign=options.allow_foreign_deploy)
        self.requests, self.dropped = builtin_requests(for_server=True), []
        if options.requests is not None:
            self.requests, self.dropped = read_for_server(options.requests, options.allow_dropped_fields)
        # The repeat decides what every other comparison means: it always runs, first.
        self.scenarios = ["repeat", *dict.fromkeys(s for s in options.scenarios if s != "repeat")]

    @property
    def deploy_seed(self) -> int | None:
        return self.deploy.default_seed if self.deploy is not None else None

    def run(self) -> AuditResult:
        with tempfile.TemporaryDirectory(prefix="moss-server-audit-") as workdir:  # generated voice clips
            return asyncio.run(self._run_all(Path(workdir)))

    async def _voice_for_all(self, client: SpeechClient, workdir: Path) -> tuple[Path | None, str]:
        """Whether the server requires a reference voice (vllm-omni's MOSS-TTS-Local does: its
        adapter refuses a request without `ref_audio`), learnt from its answer to one short request
        without one. Where it does, the audit's own requests carry a clip it makes (returned);
        requests of a file are sent as written, so one without a reference is an error here."""
        probe = with_voice(builtin_requests(for_server=True)[:1], None)[0]
        body = Send(probe, seed=1).body(self.options.server) | {"max_new_tokens": 2}
        try:
            await client.speak(probe.id, body, "reference-voice-check")
            return None, "not required: the server answers a request without ref_audio"
        except ServerError as e:
            if e.status != 400 or "ref_audio" not in e.message:
                raise
            said = e.message.split(": HTTP 400 Bad Request: ")[-1]
        missing = [r for r in self.requests if r.ref_audio is None]
        if self.options.requests is not None and missing:
            lines = ", ".join(str(r.line) for r in missing)
            raise MossError(
                f"the server requires a reference voice (it answers a request without one: {said!r}), and the "
                f"request(s) on line(s) {lines} have no ref_audio",
                file=self.options.requests,
                line=missing[0].line,
                field="ref_audio",
            )
        voice = default_voice(workdir)
        self.requests = with_voice(self.requests, voice)
        return voice, f"required ({said}); the audit's own requests carry a synthetic 2 s voice"

    async def _send(self, client: SpeechClient, run: ServerRun, scenario: str) -> list[tuple[Send, Reply]]:
        server, context, started = self.options.server, f"{scenario}/{run.label}", time.perf_counter()
        if not run.together:
            return [(s, await client.speak(s.request.id, s.body(server), context, started)) for s in run.sends]

        async def one(i: int, send: Send) -> tuple[Send, Reply]:
            await asyncio.sleep(i * run.stagger_s)
            return send, await client.speak(send.request.id, send.body(server), context, started)

        return await all_or_nothing(one(i, s) for i, s in enumerate(run.sends))

    async def _run_all(self, workdir: Path) -> AuditResult:
        start, opts = time.perf_counter(), self.options
        keys = [r.id for r in self.requests]
        async with SpeechClient(opts.server, opts.on_retry) as client:
            models = await client.models()
            served = await client.environment()
            voice, voice_note = await self._voice_for_all(client, workdir)
            reference_run = ServerRun("alone", [Send(r) for r in self.requests], together=False)
            began = time.perf_counter()
            replies = await self._send(client, reference_run, "reference")
            stagger_s = opts.stagger_s
            if stagger_s is None:  # sends must overlap for "staggered" to mean anything, on a fast server too
                stagger_s = min(max((time.perf_counter() - began) / len(replies) / 4, 0.005), 1.0)
            # Only moss serve (which says what it did in x-moss-* headers) honours audio_temperature 0.
            honoured = all(r.seed_source is not None for _, r in replies)
            greedy_ids = {r.id for r in self.requests if greedy(r, honoured)}
            reference = {s.request.id: served_output(s, r, greedy_ids) for s, r in replies}
            reported = {s.request.id: (r.seed, r.seed_source) for s, r in replies}
            mixups = MixUpLog(keys)
            mixups.add("reference", "alone", reference)
            runs_seen = {"reference/alone": _in_flight(reference_run, replies)}
            sent: list[tuple[str, ServerRun, list[tuple[Send, Reply]]]] = []
            outputs, scenario_s, skipped = {}, {}, {}
            for scenario in self.scenarios:
                began = time.perf_counter()
                if scenario == "seeds":
                    runs = seed_probes(self.requests, reported, self.deploy_seed, greedy_ids)
                else:
                    runs = build_server_runs(
                        scenario,
                        self.requests,
                        concurrency=opts.server.concurrency,
                        stagger_s=stagger_s,
                        workdir=workdir,
                        voice=voice,
                    )
                check = {"voices": lambda: voice_check(workdir), "streaming": lambda: stream_check(voice)}.get(scenario)
                if check is not None and (refused := await self._refuses(client, check(), scenario)):
                    skipped[scenario], runs = refused, []
                for run in runs:
                    got = await self._send(client, run, scenario)
                    outputs[(scenario, run.label)] = {
                        s.request.id: served_output(s, r, greedy_ids) for s, r in got if s.audited
                    }
                    mixups.add(scenario, run.label, outputs[(scenario, run.label)])
                    runs_seen[f"{scenario}/{run.label}"] = _in_flight(run, got)
                    sent.append((scenario, run, got))
                scenario_s[scenario] = time.perf_counter() - began
            models_sent = client.sent
            retries = [r.as_dict() for r in client.retries]
        rules = Rules(
            opts.level,
            opts.min_snr_db,
            opts.strict_unseeded,
            next(iter(replies))[1].sample_rate,
            deploy_seed=self.deploy_seed,
            greedy=frozenset(greedy_ids),
        )
        by_id = {r.id: r for r in self.requests}
        verdicts_alone = {k: alone(by_id[k], reference[k], outputs[("repeat", "repeat")][k], rules) for k in keys}
        cases = []
        for scenario, run, got in sent:
            for send, reply in got:
                if send.audited:
                    key = send.request.id
                    out = outputs[(scenario, run.label)][key]
                    evidence = _evidence(reply) if run.together else ""
                    args = (scenario, run.label, key, reference[key], out, verdicts_alone[key], rules)
                    cases.append(judge(*args, expect=send.expect, evidence=evidence))
        server = {
            "url": opts.server.public_url,
            "models": models,
            "model_sent": opts.server.model,
            "response_format": opts.server.response_format,
            "concurrency": opts.server.concurrency,
            "stagger_s": round(stagger_s, 4),
            "stagger": "given" if opts.stagger_s is not None else "auto: a quarter of a request's time alone",
            "timeout_s": opts.server.timeout_s,
            "retries_allowed": opts.server.retries,
            "codes": "x-moss-codes-sha256 header"
            if all(o.codes_hash for o in reference.values())
            else "unknown: the server sends no codes hash (level codes: identical audio stands for identical codes)",
            "http_requests": models_sent,
            "retries": retries,
            "skipped": skipped,
            "deploy_seed": self._deploy_note(),
            "reference_voice": voice_note,
            "dropped_fields": self.dropped,
            "probes": {f"seeds/{run.label}": [s.request.id for s in run.sends] for sc, run, _ in sent if sc == "seeds"},
            "requests": request_verdicts(cases, keys),
            "runs": runs_seen,
        }
        return AuditResult(
            AuditOptions(
                requests=opts.requests,
                scenarios=tuple(self.scenarios),
                level=opts.level,
                min_snr_db=opts.min_snr_db,
                strict_unseeded=opts.strict_unseeded,
                command=opts.command,
            ),
            cases,
            _environment(opts.server, models, served),
            reference,
            outputs,
            time.perf_counter() - start,
            rules.sample_rate,
            keys,
            mixups=mixups.warnings,
            scenario_s=scenario_s,
            server=server,
        )

    def _deploy_note(self) -> dict:
        """What the audit knows of the seed unseeded requests must get, for the reports."""
        if self.deploy is None:
            return {"file": None, "seed": None, "checked": False, "note": f"not checked: {DEPLOY_HINT}"}
        seed = self.deploy_seed
        note = (
            f"checked: every unseeded request must give the audio of the same request sent with seed {seed}"
            if seed is not None
            else "the deploy file gives no stage-0 seed: unseeded requests are not expected to be reproducible"
        )
        return {"file": str(self.options.deploy), "seed": seed, "checked": seed is not None, "note": note}

    async def _refuses(self, client: SpeechClient, check: Send, scenario: str) -> str | None:
        """The server's words when it refuses what a scenario needs (4xx), else None."""
        try:
            await client.speak(check.request.id, check.body(self.options.server), f"{scenario}/check")
        except ServerError as e:
            if e.status is not None and 400 <= e.status < 500:
                what = "reference audio" if scenario == "voices" else "streaming"
                return f"the server refuses {what}: {e.message}"
            raise
        return None


def _in_flight(run: ServerRun, got: list[tuple[Send, Reply]]) -> dict:
    """How many requests really were in flight together: this client's count, and the server's
    own (x-moss-max-in-flight) where it reports one."""
    server_counts = [r.server_in_flight for _, r in got if r.server_in_flight is not None]
    return {
        "together": run.together,
        "stagger_s": run.stagger_s,
        "sent": len(got),
        "max_in_flight_client": max((r.in_flight for _, r in got), default=0),
        "max_in_flight_server": max(server_counts) if server_counts else None,
        "requests": {
            s.request.id: {
                "in_flight_client": r.in_flight,
                "in_flight_server": r.server_in_flight,
                "sent_s": round(r.sent_s, 4),
                "wall_s": round(r.wall_s, 4),
                "attempts": r.attempts,
                "server_request_id": r.server_id,
            }
            for s, r in got
            if s.audited
        },
    }


def _environment(server: ServerOptions, models: list[str] | None, served: dict | None) -> dict:
    """The server's own account of its engine where it gives one (`moss serve`: the fields of a
    local run's environment, so baselines of both kinds compare field by field), then what this
    client knows: the address, the models listed, the format asked for, its own versions."""
    import platform

    return {
        **(served or {}),
        "server": server.public_url,
        "models": models,
        "response_format": server.response_format,
        "client_moss_version": __version__,
        "client_python_version": platform.python_version(),
    }


def run_server_audit(options: ServerAuditOptions) -> AuditResult:
    return ServerAuditor(options).run()
