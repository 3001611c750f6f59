"""Compositions of the same requests: the audit's scenarios, for every executor.

A run is an ordered list of members (the audited requests plus any neighbours), taken alone or
together, maybe staggered, streamed or split into shards. What "together" means is the
executor's: the local engine batches them (up to a max batch, late arrivals every few steps);
a server is sent them concurrently (up to --concurrency, late ones some milliseconds apart) and
decides its batches itself. Some compositions exist for one kind only: batch sizes and shards need
the engine; the seed probes need a server's answers (`seed_probes`); server-sent events, a raw-audio
stream, the batch route and the WebSocket stream are ways a server answers (its paths,
`remote.paths`), each member sent along its own."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path

from ..config.requests import Request
from ..remote.paths import BATCH_CALL, HTTP, PATHS, SINGLE, WEBSOCKET_SESSION, ServingPath, scenario_path
from ..remote.voice import voice_clip, with_voice
from ..speech_api import batch_item_lacks, session_lacks

# Local engine runs: every scenario; --server: the ones a black box can be given.
SCENARIOS = (
    "repeat",
    "batched",
    "shuffled",
    "batch-sizes",
    "seeded-neighbours",
    "length-mix",
    "staggered",
    "voices",
    "streaming",
    "sharded",
)
COMPOSITIONS = ("repeat", "concurrent", "shuffled", "seeded-neighbours", "length-mix", "staggered", "voices")


def server_scenarios() -> tuple[str, ...]:
    """A server audit's scenarios: the compositions a black box can be given, each serving path's scenario
    (`remote.paths.PATHS`, in its order), then the seed probes."""
    return (*COMPOSITIONS, *(path.scenario for path in PATHS.values() if path.scenario), "seeds")


BATCH_MAX_ITEMS = 32  # vllm-omni 0.30.0's tts_batch_max_items default (serving_speech.py:434)
SHUFFLE_SEED = 1234
PROBE_SEED = 1_000_003  # sent to unseeded requests; unlikely to be anyone's deploy seed
DEPLOY_SEED_PROBE = "the-deploy-seed-sent-explicitly"  # the seeds scenario's run that checks the deploy seed
INT64_MAX = 2**63 - 1
NEIGHBOUR_TEXTS = [
    "A neighbour with its own explicit seed.",
    "Another request sharing the batch.",
    "Background traffic, seeded.",
    "One more neighbour in the queue.",
]


@dataclass(frozen=True)
class Member:
    """One request of a run. Audited members are compared with their reference."""

    request: Request
    audited: bool = True
    seed: int | None = None  # replaces the request's own seed (a probe)
    expect: str = "identical"  # or "different": a probe whose seed must change the audio
    late: int = 0  # staggered runs: its place in the arrival order (0 arrives first)
    path: ServingPath = SINGLE  # a server: how it is asked for (the engine ignores it)

    @property
    def key(self) -> str:
        return self.request.id

    @property
    def batched(self) -> bool:
        """Sent as an item of a batch call, which carries no seed."""
        return self.path.transport == BATCH_CALL

    @property
    def sent_seed(self) -> int | None:
        return self.seed if self.seed is not None else self.request.seed


@dataclass
class Run:
    label: str
    members: list[Member]
    alone: bool = False  # every member on its own, one after another (the reference, the repeat)
    max_batch: int | None = None  # the engine's batch for this run (None: the audit's)
    stream: bool = False  # the engine: decoded chunk by chunk while generating
    shards: list[list[Member]] | None = None  # split into engine runs of their own (with --ray, on workers)
    needs_voice: bool = False  # a server may refuse reference audio (the scenario is then skipped)
    one_connection: bool = False  # a server: its WebSocket utterances go in turn on one connection, as a voice agent's
    scenario: str = ""  # the scenario it belongs to ("reference": every request alone, the baseline)

    @property
    def name(self) -> str:
        return f"{self.scenario}/{self.label}"

    @property
    def audited(self) -> list[Member]:
        return [m for m in self.members if m.audited]

    def pieces(self) -> list[list[Member]]:
        """The separate engine runs (or one-at-a-time sends) this run is made of."""
        if self.alone:
            return [[m] for m in self.members]
        return self.shards if self.shards is not None else [self.members]

    def path(self, key: str) -> ServingPath:
        """How a server was asked for a member's audio in this run."""
        return next(m for m in self.members if m.key == key).path

    @property
    def paths(self) -> list[ServingPath]:
        """The ways other than the single route its members go (a server may refuse one: the run is then skipped)."""
        return list(dict.fromkeys(m.path for m in self.members if m.path is not SINGLE))


@dataclass(frozen=True)
class Skipped:
    """A run the executor could not make, and why (a server that refuses what it needs)."""

    reason: str


@dataclass(frozen=True)
class Target:
    """What the builder needs to know of where the runs go."""

    server: bool  # a server (True) or the local engine / its Ray workers
    max_batch: int = 8  # the local engine's batch
    concurrency: int = 8  # a server's requests in flight at once
    frame_budgets: tuple[int, ...] = ()  # the engine: each audited request's frame budget
    voice: Path | None = None  # a server that requires ref_audio: the clip for members without one
    chunk_schedule: tuple[int, ...] = ()  # the local streaming decode's chunk sizes (for the label)


def members(requests: list[Request], *, audited: bool = True, path: ServingPath = SINGLE) -> list[Member]:
    return [Member(r, audited=audited, path=path) for r in requests]


def neighbour_requests(count: int, prefix: str, *, seed_base: int, frames: list[int], greedy: bool) -> list[Request]:
    """Extra requests with explicit seeds that share a composition with the audited ones."""
    return [
        Request(
            id=f"{prefix}-{i}",
            text=NEIGHBOUR_TEXTS[i % len(NEIGHBOUR_TEXTS)],
            line=0,
            seed=seed_base + i,
            max_new_frames=frames[i % len(frames)],
            sampling={"audio_temperature": 0.0} if greedy else {},
        )
        for i in range(count)
    ]


def voice_neighbour_requests(count: int, workdir: Path) -> list[Request]:
    """Neighbours cloning two different synthetic voices (one in continuation mode) and one without."""
    clips = [voice_clip(workdir / f"voice-{i}.wav", 1.6, 22_050, pitch) for i, pitch in enumerate((110.0, 220.0))]
    requests = []
    for i in range(count):
        kind = i % 3
        requests.append(
            Request(
                id=f"neighbour-voice-{i}",
                text=NEIGHBOUR_TEXTS[i % len(NEIGHBOUR_TEXTS)],
                line=0,
                seed=3000 + i,
                max_new_frames=[20, 12, 16][kind],
                ref_audio=clips[kind % 2] if kind < 2 else None,
                ref_text="A neighbour's transcript" if kind == 1 else None,
            )
        )
    return requests


def interleave(a: list, b: list) -> list:
    out = []
    for i in range(max(len(a), len(b))):
        out += a[i : i + 1] + b[i : i + 1]
    return out


def _neighbours(requests: list[Request], target: Target) -> list[Member]:
    return members(with_voice(requests, target.voice), audited=False)


def reference_run(audited: list[Request]) -> Run:
    """Every request alone: what every other run is compared with."""
    return Run("alone", members(audited), alone=True, scenario="reference")


def build_runs(name: str, audited: list[Request], target: Target, workdir: Path) -> list[Run]:
    runs = _runs(name, audited, target, workdir)
    for run in runs:
        run.scenario = name
    return runs


def _runs(name: str, audited: list[Request], target: Target, workdir: Path) -> list[Run]:
    n, batch = len(audited), target.max_batch
    sent = members(audited)
    path = scenario_path(name) if target.server else None
    if path is not None:
        return path_runs(path, audited, target)
    if name == "repeat":
        return [Run("repeat", sent, alone=True)]
    if name == "batched":
        return [Run(f"max-batch-{batch}", sent)]
    if name == "concurrent":
        return [Run(f"concurrent-{target.concurrency}", sent)]
    if name == "shuffled":
        order = list(sent)
        random.Random(SHUFFLE_SEED).shuffle(order)
        return [Run(f"shuffled-seed-{SHUFFLE_SEED}", order)]
    if name == "batch-sizes":
        return [Run(f"max-batch-{size}", sent, max_batch=size) for size in sorted({2, 3, batch}) if 1 < size <= batch]
    if name == "seeded-neighbours":
        neighbours = neighbour_requests(n, "neighbour-seeded", seed_base=1000, frames=[16, 24, 8], greedy=False)
        return [Run("with-seeded-neighbours", interleave(_neighbours(neighbours, target), sent))]
    if name == "length-mix":
        # A request's budget replaces the deploy's max_tokens (config/effective.py frame_budget), so a long
        # neighbour asks for three times the longest audited budget, whatever max_tokens says; only what
        # max_model_len leaves after its prompt bounds it, where the engine or the server sets it.
        longest = max(target.frame_budgets or [r.max_new_frames or 16 for r in audited], default=16)
        long = 3 * longest
        # Greedy on the engine; seeded on a server, which may not honour greedy decoding (vllm-omni does not).
        neighbours = neighbour_requests(
            n, "neighbour-length", seed_base=2000, frames=[long, 2], greedy=not target.server
        )
        return [Run("with-long-and-short-neighbours", interleave(_neighbours(neighbours, target), sent))]
    if name == "staggered":
        late = [dataclasses.replace(m, late=i) for i, m in enumerate(sent)]
        return [Run("sends-staggered" if target.server else "arrivals-every-3-steps", late)]
    if name == "voices":
        voices = _neighbours(voice_neighbour_requests(n, workdir), target)
        return [Run("with-voice-cloning-neighbours", interleave(voices, sent), needs_voice=True)]
    if name == "streaming":  # the engine's: each request decoded in the deploy's chunks as it is generated
        schedule = "-".join(str(c) for c in target.chunk_schedule)
        return [Run(f"streamed-chunks-{schedule}-then-repeat", sent, stream=True)]
    if name == "sharded":  # as if split across workers: each shard is an engine run of its own
        size = -(-n // 3)
        backwards = sent[::-1]
        return [
            Run("2-shards-alternating", sent, shards=[s for s in (sent[0::2], sent[1::2]) if s]),
            Run("3-shards-contiguous-reversed", sent, shards=[backwards[i : i + size] for i in range(0, n, size)]),
        ]
    raise ValueError(f"unknown scenario {name!r}")


def path_runs(path: ServingPath, audited: list[Request], target: Target) -> list[Run]:
    """A serving path's scenario, by how the path carries requests: an HTTP path's every request sent that way
    at once; the batch route's and the WebSocket stream's runs (batch_runs, websocket_runs)."""
    if path.transport == HTTP:
        return [Run(path.run.format(concurrency=target.concurrency), members(audited, path=path))]
    if path.transport == BATCH_CALL:
        return batch_runs(path, audited, target)
    if path.transport == WEBSOCKET_SESSION:
        return websocket_runs(path, audited, target)
    raise ValueError(f"{path.name}: no runs for a path whose requests go {path.transport}")


def batch_runs(path: ServingPath, audited: list[Request], target: Target) -> list[Run]:
    """The batch route's runs: every request an item can carry (no seed, no field a vllm-omni batch
    item lacks: speech_api.batch_item_lacks) first alone, each the one item of its own call (the seed
    question), then in one batch call, at most BATCH_MAX_ITEMS to a call, while the other requests
    and two seeded neighbours go as single requests, so items and single requests share the server's
    batch. None where no request can be an item."""
    items = [m for m in members(audited) if not batch_item_lacks(m.request)]
    if not items:
        return []
    singles = [m for m in members(audited) if batch_item_lacks(m.request)]
    neighbours = _neighbours(
        neighbour_requests(2, "neighbour-single", seed_base=5000, frames=[16, 6], greedy=False), target
    )
    batched = [dataclasses.replace(m, path=path) for m in items]
    calls = "one-call" if len(items) <= BATCH_MAX_ITEMS else f"{-(-len(items) // BATCH_MAX_ITEMS)}-calls"
    label = f"{len(items)}-items-in-{calls}-with-{len(singles) + len(neighbours)}-single-requests"
    return [
        # Alone, an item has the shapes of the single request alone: whether it gets the deploy seed.
        Run("each-item-alone-in-its-own-call", batched, alone=True),
        Run(label, interleave(batched, singles + neighbours)),
    ]


def websocket_runs(path: ServingPath, audited: list[Request], target: Target) -> list[Run]:
    """The WebSocket stream's runs, for every request an utterance carries unchanged (speech_api.session_lacks):
    its text in chunks then input.done, with split_granularity "none", which makes it the single route's
    request (remote.paths). Each utterance first on a connection of its own, one after another (the seed
    question); then all of them in turn on one connection, each reconfiguring it, as a voice agent reuses
    its connection (a later utterance must equal it on a fresh one); then every utterance in a session of
    its own at once, while the other requests and two seeded neighbours go to the single route, so
    sessions and HTTP requests share the server's batch. None where no request can be an utterance."""
    utterances = [m for m in members(audited, path=path) if not session_lacks(m.request)]
    if not utterances:
        return []
    singles = [m for m in members(audited) if session_lacks(m.request)]
    neighbours = _neighbours(
        neighbour_requests(2, "neighbour-http", seed_base=6000, frames=[16, 6], greedy=False), target
    )
    traffic = len(singles) + len(neighbours)
    return [
        Run("each-utterance-on-a-connection-of-its-own", utterances, alone=True),
        Run("every-utterance-in-turn-on-one-connection", utterances, alone=True, one_connection=True),
        Run(
            f"{len(utterances)}-sessions-at-once-with-{traffic}-http-requests",
            interleave(utterances, singles + neighbours),
        ),
    ]


def other_seed(seed: int) -> int:
    return seed + 1 if seed < INT64_MAX else seed - 1


def seed_probes(audited: list[Request], deploy_seeds: dict[str, int | None], greedy: set[str]) -> list[Run]:
    """The audit's own requests about seeds, each sent alone. A request with an explicit seed is
    re-sent with another one (the audio must change). An unseeded request is re-sent with the
    deploy seed it should get (the audio must not change: the deploy-seed fix); where none is
    known, with a seed of the audit's (the audio must change). Greedy requests get no probe."""
    other, deploy, given = [], [], []
    for request in audited:
        if request.id in greedy:
            continue
        if request.seed is not None:
            other.append(Member(request, seed=other_seed(request.seed), expect="different"))
        elif deploy_seeds.get(request.id) is not None:
            deploy.append(Member(request, seed=deploy_seeds[request.id]))
        else:
            given.append(Member(request, seed=PROBE_SEED, expect="different"))
    runs = [
        Run("another-explicit-seed", other, alone=True, scenario="seeds"),
        Run(DEPLOY_SEED_PROBE, deploy, alone=True, scenario="seeds"),
        Run(f"unseeded-sent-with-seed-{PROBE_SEED}", given, alone=True, scenario="seeds"),
    ]
    return [run for run in runs if run.members]
