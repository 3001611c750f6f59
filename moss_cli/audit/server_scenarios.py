"""Compositions of the same requests on a live server. A server decides by itself which requests
share a batch, so an audit composes them with concurrency and timing instead: every request alone
(one at a time: the reference), then in flight together, in another order, next to neighbours,
sent at intervals; and it adds its own seed probes. The neighbours are the local audit's
(`scenarios.py`), sent as request bodies; where the server requires a reference voice
(vllm-omni's MOSS-TTS-Local does), every request the audit makes itself carries one it made."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

from ..config.requests import Request
from ..remote.settings import ServerOptions
from ..speech_api import body_from_request
from .scenarios import SHUFFLE_SEED, interleave, neighbour_requests, voice_neighbour_requests

SERVER_SCENARIOS = (
    "repeat",
    "concurrent",
    "shuffled",
    "seeded-neighbours",
    "length-mix",
    "staggered",
    "voices",
    "streaming",
    "seeds",
)
PROBE_SEED = 1_000_003  # sent to unseeded requests; unlikely to be anyone's deploy seed
INT64_MAX = 2**63 - 1


@dataclass
class Send:
    """One request body to send. Audited sends are compared with the request's reference."""

    request: Request
    audited: bool = True
    seed: int | None = None  # replaces the request's own seed (a probe)
    expect: str = "identical"  # or "different": a probe whose seed must change the audio
    stream: bool = False  # ask for the audio as it is made (vllm-omni: server-sent events)

    def body(self, server: ServerOptions) -> dict:
        body = body_from_request(
            self.request, model=server.model, response_format=server.response_format, seed=self.seed
        )
        if self.stream:
            body["stream"] = True
            if body["response_format"] not in ("wav", "pcm"):  # what vllm-omni streams
                body["response_format"] = "wav"
        return body

    @property
    def sent_seed(self) -> int | None:
        return self.seed if self.seed is not None else self.request.seed


@dataclass
class ServerRun:
    label: str
    sends: list[Send]
    together: bool = True  # all in flight at once (up to --concurrency); False: one at a time
    stagger_s: float = 0.0  # together: the i-th send waits i x this first

    @property
    def audited(self) -> list[Send]:
        return [s for s in self.sends if s.audited]


def greedy(request: Request, honoured: bool) -> bool:
    """audio_temperature 0, on a server that honours it (moss serve; vllm-omni drops the field and
    samples): decoding ignores any seed, so seed probes would prove nothing."""
    return honoured and request.sampling.get("audio_temperature") == 0


def default_voice(workdir: Path) -> Path:
    """The reference clip the audit gives its own requests where the server requires one: 2 s, well
    inside vllm-omni's 1-30 s."""
    import soundfile as sf

    from ..io.reference_audio import synthetic_voice  # torch: not for --help, which reads SERVER_SCENARIOS

    path = workdir / "default-voice.wav"
    if not path.exists():
        sf.write(str(path), synthetic_voice(2.0, 24_000, 165.0), 24_000, subtype="PCM_16")
    return path


def with_voice(requests: list[Request], voice: Path | None) -> list[Request]:
    """`requests`, each without a reference voice given `voice` (None: unchanged)."""
    if voice is None:
        return requests
    return [r if r.ref_audio is not None else dataclasses.replace(r, ref_audio=voice) for r in requests]


def other_seed(seed: int) -> int:
    return seed + 1 if seed < INT64_MAX else seed - 1


def build_server_runs(
    name: str, audited: list[Request], *, concurrency: int, stagger_s: float, workdir: Path, voice: Path | None
) -> list[ServerRun]:
    """The runs of one scenario. `voice`: the clip for neighbours without one, where the server
    requires a reference (None: it does not)."""
    n = len(audited)
    sends = [Send(r) for r in audited]
    if name == "repeat":
        return [ServerRun("repeat", sends, together=False)]
    if name == "concurrent":
        return [ServerRun(f"concurrent-{concurrency}", sends)]
    if name == "shuffled":
        order = list(sends)
        random.Random(SHUFFLE_SEED).shuffle(order)
        return [ServerRun(f"shuffled-seed-{SHUFFLE_SEED}", order)]
    if name == "seeded-neighbours":
        neighbours = neighbour_requests(n, "neighbour-seeded", seed_base=1000, frames=[16, 24, 8], greedy=False)
        return [ServerRun("with-seeded-neighbours", interleave(_neighbours(neighbours, voice), sends))]
    if name == "length-mix":
        longest = max((r.max_new_frames or 16 for r in audited), default=16)
        # Seeded, not greedy: a server may not honour greedy decoding (vllm-omni does not).
        neighbours = neighbour_requests(n, "neighbour-length", seed_base=2000, frames=[3 * longest, 2], greedy=False)
        return [ServerRun("with-long-and-short-neighbours", interleave(_neighbours(neighbours, voice), sends))]
    if name == "staggered":
        return [ServerRun(f"sends-every-{round(stagger_s * 1000)}-ms", sends, stagger_s=stagger_s)]
    if name == "voices":
        voices = _neighbours(voice_neighbour_requests(n, workdir), voice)
        return [ServerRun("with-voice-cloning-neighbours", interleave(voices, sends))]
    if name == "streaming":
        streamed = [Send(r, stream=True) for r in audited]
        return [ServerRun(f"streamed-{concurrency}-at-once", streamed)]
    raise ValueError(f"unknown scenario {name!r}")


def voice_check(workdir: Path) -> Send:
    """One voice-cloning neighbour, sent alone first: a server that refuses reference audio skips
    the `voices` scenario (reported) instead of failing the audit."""
    return _neighbours(voice_neighbour_requests(1, workdir), None)[0]


def stream_check(voice: Path | None) -> Send:
    """One short neighbour asking for a stream, sent alone first: a server that refuses streaming
    skips the `streaming` scenario (reported) instead of failing the audit."""
    neighbour = neighbour_requests(1, "neighbour-stream", seed_base=4000, frames=[4], greedy=False)
    return dataclasses.replace(_neighbours(neighbour, voice)[0], stream=True)


def seed_probes(
    audited: list[Request],
    reported: dict[str, tuple[int | None, str | None]],
    deploy_seed: int | None,
    greedy_ids: set[str],
) -> list[ServerRun]:
    """The audit's own requests about seeds, each sent alone. A request with an explicit seed is
    re-sent with another one (the audio must change). An unseeded request is re-sent with the
    deploy seed (the audio must not change: the deploy-seed fix), from --deploy or else as the
    server reports it; when neither says, with a seed of the audit's (the audio must change).
    `reported`: request id -> (effective seed, seed source) from the reference's headers. Greedy
    requests get no probe."""
    other, deploy, given = [], [], []
    for request in audited:
        if request.id in greedy_ids:
            continue
        seed, source = reported.get(request.id, (None, None))
        expected = deploy_seed if deploy_seed is not None else (seed if source == "deploy" else None)
        if request.seed is not None:
            other.append(Send(request, seed=other_seed(request.seed), expect="different"))
        elif expected is not None:
            deploy.append(Send(request, seed=expected, expect="identical"))
        else:
            given.append(Send(request, seed=PROBE_SEED, expect="different"))
    runs = [
        ServerRun("another-explicit-seed", other, together=False),
        ServerRun("the-deploy-seed-sent-explicitly", deploy, together=False),
        ServerRun(f"unseeded-sent-with-seed-{PROBE_SEED}", given, together=False),
    ]
    return [run for run in runs if run.sends]


def _neighbours(requests: list[Request], voice: Path | None) -> list[Send]:
    return [Send(r, audited=False) for r in with_voice(requests, voice)]
