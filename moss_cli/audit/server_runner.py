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
from ..config.requests import Request, read_requests
from ..errors import MossError
from ..remote.client import Retry, ServerError, SpeechClient, all_or_nothing
from ..remote.references import check_references, reference_sha256
from ..remote.reply import Reply, audio_tensor
from ..remote.settings import ServerOptions
from .builtin import builtin_requests
from .compare import Output
from .mixups import MixUpLog
from .runner import LEVELS, AuditOptions, AuditResult
from .server_scenarios import SERVER_SCENARIOS, Send, ServerRun, build_server_runs, greedy, seed_probes, voice_check
from .server_verdicts import Rules, alone, judge, request_verdicts


@dataclass
class ServerAuditOptions:
    server: ServerOptions
    requests: Path | None = None
    scenarios: tuple[str, ...] = SERVER_SCENARIOS
    level: str = "codes"
    min_snr_db: float = 60.0
    strict_unseeded: bool = False
    stagger_s: float | None = None  # None: a quarter of a request's time alone (measured by the reference run)
    on_retry: Callable[[Retry], None] | None = field(default=None, repr=False)
    command: str | None = None  # the command line, as the reports show it (secrets already blanked)


def served_content(request: Request, seed: int | None) -> dict:
    """What should shape a request's audio (as mixups.request_content, from the request itself)."""
    return {
        "text": request.text,
        "prompt fields": request.prompt_fields,
        "ref_text": request.ref_text,
        "ref_audio": reference_sha256(request),
        "seed": None if greedy(request) else seed,
        "sampling": request.sampling,
    }


def served_output(send: Send, reply: Reply) -> Output:
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
        content=served_content(send.request, seed),
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
        self.requests = read_requests(options.requests) if options.requests else builtin_requests()
        check_references(self.requests, options.requests)
        # The repeat decides what every other comparison means: it always runs, first.
        self.scenarios = ["repeat", *dict.fromkeys(s for s in options.scenarios if s != "repeat")]

    def run(self) -> AuditResult:
        with tempfile.TemporaryDirectory(prefix="moss-server-audit-") as workdir:  # generated voice clips
            return asyncio.run(self._run_all(Path(workdir)))

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
            reference_run = ServerRun("alone", [Send(r) for r in self.requests], together=False)
            began = time.perf_counter()
            replies = await self._send(client, reference_run, "reference")
            stagger_s = opts.stagger_s
            if stagger_s is None:  # sends must overlap for "staggered" to mean anything, on a fast server too
                stagger_s = min(max((time.perf_counter() - began) / len(replies) / 4, 0.005), 1.0)
            reference = {s.request.id: served_output(s, r) for s, r in replies}
            reported = {s.request.id: (r.seed, r.seed_source) for s, r in replies}
            mixups = MixUpLog(keys)
            mixups.add("reference", "alone", reference)
            runs_seen = {"reference/alone": _in_flight(reference_run, replies)}
            sent: list[tuple[str, ServerRun, list[tuple[Send, Reply]]]] = []
            outputs, scenario_s, skipped = {}, {}, {}
            for scenario in self.scenarios:
                began = time.perf_counter()
                if scenario == "seeds":
                    runs = seed_probes(self.requests, reported)
                else:
                    runs = build_server_runs(
                        scenario,
                        self.requests,
                        concurrency=opts.server.concurrency,
                        stagger_s=stagger_s,
                        workdir=workdir,
                    )
                if scenario == "voices" and (refused := await self._refuses_voices(client, workdir)):
                    skipped[scenario], runs = refused, []
                for run in runs:
                    got = await self._send(client, run, scenario)
                    outputs[(scenario, run.label)] = {s.request.id: served_output(s, r) for s, r in got if s.audited}
                    mixups.add(scenario, run.label, outputs[(scenario, run.label)])
                    runs_seen[f"{scenario}/{run.label}"] = _in_flight(run, got)
                    sent.append((scenario, run, got))
                scenario_s[scenario] = time.perf_counter() - began
            models_sent = client.sent
            retries = [r.as_dict() for r in client.retries]
        rules = Rules(opts.level, opts.min_snr_db, opts.strict_unseeded, next(iter(replies))[1].sample_rate)
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

    async def _refuses_voices(self, client: SpeechClient, workdir: Path) -> str | None:
        """The server's words when it refuses reference audio (4xx), else None."""
        check = voice_check(workdir)
        try:
            await client.speak(check.request.id, check.body(self.options.server), "voices/check")
        except ServerError as e:
            if e.status is not None and 400 <= e.status < 500:
                return f"the server refuses reference audio: {e.message}"
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
