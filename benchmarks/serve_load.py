"""Load and soak test for `moss serve`: many requests at once against a real `moss serve` process
(the tiny model), some malformed, some hung up mid-stream, some sent while its queue is full.

    python benchmarks/serve_load.py [--requests 500] [--concurrency 32] [--bad 0.10] [--hangups 0.05]
        [--queue-full 0.05] [--max-batch 8] [--max-queue N] [--threads 1] [--rounds 1]

Each request is of one class, and must get:
- good: 200 and exactly the PCM it got alone (the reference: each good body sent alone, one at a
  time, before the load); some stream (raw chunks or SSE events), some ask for pcm or flac;
- malformed (--bad): a 4xx with an error in the API's JSON shape;
- hang-up (--hangups): a long streaming request whose client closes the connection after its
  first audio; the server must drop it and free its place;
- queue-full (--queue-full): sent while the server's queue is known to be full: a 503 with
  Retry-After (the load client never retries it).

The load goes in segments at --concurrency. Between segments, once /health shows nothing in flight,
a burst fills the server: max-batch long requests run (their first audio has come), max-queue more
wait (/health counts them), then the queue-full requests go. --max-queue defaults to just above what
the steady load can fill (concurrency - max-batch + 4): only the bursts fill it.
After every segment and at the end /health must show 0 requests in flight (no hang-up leaked its
place). The server's RSS is sampled all along; the last quarter of the load phase must stay within
5% of the first (and, with --rounds, the RSS after the last round within 5% of the first round's).
SIGTERM must then stop the server with exit 0. Exit code 1 if anything was wrong.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from moss_cli.io.audio import pcm_sha256
from moss_cli.remote.reply import NotAudio, decode_audio
from moss_cli.speech_api import HEADER_CHANNELS, HEADER_SAMPLE_RATE, HEALTH_PATH, SPEECH_PATH

HERE = Path(__file__).resolve().parent.parent
SPEECH, HEALTH = SPEECH_PATH, HEALTH_PATH
START_S, STOP_S = 120.0, 60.0  # bounded waits for the server to come up and to go down
SETTLE_S = 30.0  # bounded wait for the server's in-flight count to reach 0 after a segment
WORDS = "the quick brown fox jumps over a lazy dog while rain falls softly on the quiet town".split()
WAV_HEADER = 44  # a streaming WAV starts with its header; the audio comes after
DELTA = b"event: speech.audio.delta"  # an SSE event with a piece of the stream's bytes
RSS_GROWTH = 0.05  # the most the RSS may grow from the first to the last quarter of the load
QUEUE_MARGIN = 4  # default --max-queue: room for hung-up requests the server has not dropped yet
BURST_REFUSED = 10  # queue-full requests per burst, at most

# A long request: the tiny model's stop head ends most requests within ~25 frames; this text with
# seed LONG_SEED runs ~117 (1 thread). The seed is searched upwards from there if it no longer does.
LONG_TEXT = "A long request holds its place in the batch while the queue fills up behind it."
LONG_SEED, LONG_FRAMES, LONG_BUDGET = 308, 100, 200


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, log: Path, *extra: str) -> subprocess.Popen:
    """`moss serve` in its own process; its output goes to `log` (a pipe nobody reads could fill)."""
    env = {**os.environ, "PYTHONPATH": str(HERE), "CI": "1"}
    command = [sys.executable, "-m", "moss_cli", "serve", "--port", str(port), *extra]
    with log.open("w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=HERE)


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = START_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moss serve exited with {process.returncode} before it was ready")
        try:
            if httpx.get(url + HEALTH, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"moss serve was not ready after {timeout:.0f} s")


def stop_server(process: subprocess.Popen, timeout: float = STOP_S) -> tuple[int, float]:
    """SIGTERM, then wait (bounded); (exit code, seconds it took)."""
    start = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait(10)
    return code, time.perf_counter() - start


def in_flight(url: str) -> int:
    """The engine's requests submitted and not yet answered, as /health shows them."""
    return int(httpx.get(url + HEALTH, timeout=10).json()["in_flight"])


def settle(url: str, count: int = 0, timeout: float = SETTLE_S) -> tuple[int, float]:
    """Wait (bounded) until /health shows `count` in flight: (the count last seen, seconds waited)."""
    start = time.monotonic()
    while True:
        seen = in_flight(url)
        waited = time.monotonic() - start
        if seen == count or waited > timeout:
            return seen, waited
        time.sleep(0.02)


class RssSampler:
    """The server's resident memory (MB), read from /proc every `every` seconds, by phase."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[str, float]] = []
        self.phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.samples.append((self.phase, self.rss()))
            except OSError:  # the process is gone
                return

    def __enter__(self) -> RssSampler:
        self.samples.append(("start", self.rss()))
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def of(self, phase: str) -> list[float]:
        return [rss for p, rss in self.samples if p == phase]


def good_body(i: int, rng: random.Random) -> dict:
    """A varied request: lengths, seeds (explicit, 0, the deploy's), prompt fields, formats, streaming."""
    body = {
        "input": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14))).capitalize() + ".",
        "max_new_tokens": rng.randint(6, 40),
    }
    kind = i % 6
    if kind in (0, 1, 2):
        body["seed"] = rng.randint(0, 2**31) if kind else 0
    if kind == 3:
        body.update(instructions="A calm voice.", audio_temperature=1.2, audio_top_k=20)
    if i % 7 == 0:
        body["language"] = rng.choice(["en", "English", "fr"])
    body["response_format"] = ("wav", "pcm", "flac")[i % 3]
    if i % 5 == 0 and body["response_format"] != "flac":
        stream(body, "sse" if i % 10 == 0 else "audio")
    return body


def stream(body: dict, stream_format: str = "audio") -> dict:
    """A streaming request: raw audio chunks (`audio`) or vllm-omni's server-sent events (`sse`)."""
    body.update(stream=True, stream_format=stream_format)
    return body


def long_body(seed: int, response_format: str = "pcm") -> dict:
    return {"input": LONG_TEXT, "seed": seed, "max_new_tokens": LONG_BUDGET, "response_format": response_format}


BAD = [  # (body bytes, what it is); each must get a 4xx
    (b'{"input": "unterminated', "malformed JSON"),
    (json.dumps({"input": "x", "seed": "twelve"}).encode(), "seed of the wrong type"),
    (json.dumps({"input": "x", "audio_top_p": 7}).encode(), "audio_top_p out of range"),
    (json.dumps({"input": "x", "temperature": 0.7}).encode(), "a field vllm-omni drops"),
    (json.dumps({"input": "x", "colour": "red"}).encode(), "unknown field"),
    (json.dumps({"input": "x", "ref_audio": "/etc/passwd"}).encode(), "path reference"),
    (json.dumps({"input": "x", "ref_audio": "http://127.0.0.1:9/a.wav"}).encode(), "URL reference"),
    (json.dumps({"input": "a" * 100_000}).encode(), "text too long"),
    (json.dumps([{"input": "x"}]).encode(), "not an object"),
    (json.dumps({"input": "x", "response_format": "flac", "stream": True}).encode(), "a FLAC stream"),
]
CLASSES = ("good", "malformed", "hang-up", "queue-full")


@dataclass
class Item:
    kind: str  # one of CLASSES
    content: bytes
    what: str = ""  # what is wrong with a malformed one
    body: dict | None = None  # None: malformed


def item(kind: str, body: dict) -> Item:
    return Item(kind, json.dumps(body).encode(), body=body)


@dataclass
class Outcome:
    status: int
    pcm_sha256: str | None = None
    seconds: float = 0.0
    first_audio_s: float | None = None  # a stream's time to its first audio bytes
    retry_after: str | None = None
    error_shaped: bool = False  # the body is {"error": {"message", "type", "param", "code"}}
    batch_seen: int = 0  # X-Moss-Max-In-Flight (not sent when streaming)
    ended: float = 0.0  # time.perf_counter() when the response was over
    error: str | None = None  # why there is no whole answer (status 0)


def send(client: httpx.Client, request: Item, on_audio=None) -> Outcome:
    """One request, read to its end (a hang-up: to its first audio, then the connection closes);
    the PCM hash of its audio, decoded from wav / flac / pcm, streamed or not."""
    streamed = bool(request.body and request.body.get("stream"))
    header = WAV_HEADER if streamed and request.body.get("response_format", "wav") == "wav" else 0
    sse = streamed and request.body.get("stream_format") == "sse"
    start = time.perf_counter()
    data, first_audio = bytearray(), None
    try:
        with client.stream("POST", SPEECH, content=request.content, headers={"content-type": "application/json"}) as r:
            for part in r.iter_raw():
                data += part
                if first_audio is None and r.status_code == 200 and audio_arrived(data, header, sse):
                    first_audio = time.perf_counter() - start
                    if on_audio is not None:
                        on_audio()
                    if request.kind == "hang-up":
                        break  # leaving the block closes the connection mid-stream
    except httpx.HTTPError as e:  # no whole answer (a stream cut short, a refused connection): status 0
        ended = time.perf_counter()
        return Outcome(0, seconds=ended - start, first_audio_s=first_audio, ended=ended, error=repr(e))
    ended = time.perf_counter()
    outcome = Outcome(r.status_code, seconds=ended - start, first_audio_s=first_audio, ended=ended)
    outcome.retry_after = r.headers.get("retry-after")
    if r.status_code != 200:
        outcome.error_shaped = error_shaped(bytes(data))
    elif request.kind == "good":  # decoded as the moss client decodes any answer (remote/reply.py)
        body, rate = request.body, int(r.headers.get(HEADER_SAMPLE_RATE) or 0)
        raw = body.get("stream_format") == "audio"
        try:
            pcm, _ = decode_audio(
                bytes(data),
                body.get("response_format", "wav"),
                r.headers.get("content-type", ""),
                sample_rate=rate,
                channels=int(r.headers[HEADER_CHANNELS]),
                raw_stream=raw,
            )
        except NotAudio as e:  # an event stream that ended in an error, or without speech.audio.done
            outcome.status, outcome.error = 0, str(e)
            return outcome
        outcome.pcm_sha256 = pcm_sha256(pcm)
        outcome.batch_seen = int(r.headers.get("x-moss-max-in-flight", 0))
    return outcome


def audio_arrived(data: bytearray, header: int, sse: bool) -> bool:
    """Some audio is here: past a streaming WAV's header (in SSE, the header is the first delta)."""
    return data.count(DELTA) > (header > 0) if sse else len(data) > header


def error_shaped(data: bytes) -> bool:
    """The OpenAI error shape, whatever words the server puts in `type` and `code`."""
    try:
        error = json.loads(data)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return (
        isinstance(error, dict)
        and isinstance(error.get("message"), str)
        and bool(error["message"])
        and isinstance(error.get("type"), str)
        and {"param", "code"} <= error.keys()
    )


def find_long(client: httpx.Client, tries: int = 2000) -> int:
    """A seed whose LONG_TEXT request, alone, runs at least LONG_FRAMES frames."""
    for seed in itertools.islice(itertools.count(LONG_SEED), tries):
        answer = client.post(SPEECH, json=long_body(seed))
        answer.raise_for_status()
        if int(answer.headers["x-moss-frames"]) >= LONG_FRAMES:
            return seed
    raise RuntimeError(f"no seed in {tries} from {LONG_SEED} runs {LONG_FRAMES} frames")


@dataclass
class Burst:
    fillers: list[Item]  # max_batch long streams: they hold every place in the batch
    waiters: list[Item]  # max_queue good requests: they fill the queue
    refused: list[Item]  # then these must be refused


def counts(requests: int, bad: float, hangups: float, queue_full: float, full: int) -> tuple[int, ...]:
    """(good requests outside bursts, malformed, hang-ups, queue-full, bursts); each burst takes
    `full` good requests (max_batch + max_queue) to fill the server."""
    n_bad, n_hang, n_refused = (round(requests * share) for share in (bad, hangups, queue_full))
    bursts = math.ceil(n_refused / BURST_REFUSED)
    n_steady = requests - n_bad - n_hang - n_refused - bursts * full
    if n_steady < 0:
        raise ValueError(f"{requests} requests leave too few good ones to fill {bursts} burst(s) of {full}")
    return n_steady, n_bad, n_hang, n_refused, bursts


def plan_load(
    requests: int, bad: float, hangups: float, queue_full: float, max_batch: int, max_queue: int, seed: int, long: int
) -> list[list[Item] | Burst]:
    """The load: segments (lists of items, sent at the load's concurrency) with a burst between each two."""
    rng = random.Random(seed)
    n_steady, n_bad, n_hang, n_refused, bursts = counts(requests, bad, hangups, queue_full, max_batch + max_queue)
    goods = (item("good", good_body(i, rng)) for i in itertools.count())
    steady = [next(goods) for _ in range(n_steady)]
    steady += [Item("malformed", *BAD[i % len(BAD)]) for i in range(n_bad)]
    steady += [item("hang-up", stream(long_body(long, ("pcm", "wav")[i % 2]))) for i in range(n_hang)]
    rng.shuffle(steady)
    cut = [round(k * len(steady) / (bursts + 1)) for k in range(bursts + 2)]
    plan: list[list[Item] | Burst] = [steady[cut[0] : cut[1]]]
    for k in range(bursts):
        fillers = [item("good", stream(long_body(long, ("pcm", "wav")[i % 2]))) for i in range(max_batch)]
        waiters = [next(goods) for _ in range(max_queue)]
        count = n_refused // bursts + (k < n_refused % bursts)
        refused = [item("queue-full", good_body(i, rng)) for i in range(count)]
        plan += [Burst(fillers, waiters, refused), steady[cut[k + 1] : cut[k + 2]]]
    return plan


@dataclass
class BurstReport:
    in_flight_before: int  # /health just before the queue-full requests went (max_batch + max_queue)
    in_flight_after: int  # and just after they were answered
    filler_ended_early: bool = False  # a long request ended before the refused were answered


@dataclass
class LoadReport:
    requests: int
    concurrency: int
    max_batch: int
    max_queue: int
    threads: int
    rounds: int = 1
    reference_s: float = 0.0
    round_walls_s: list[float] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=dict)  # by class, over all rounds
    passed_by_class: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, dict[int, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    latency_s: dict[str, float] = field(default_factory=dict)  # good requests: p50, p99
    first_audio_s: dict[str, float] = field(default_factory=dict)  # streamed good requests: p50, p99
    streamed: int = 0
    max_batch_seen: int = 0
    bursts: list[BurstReport] = field(default_factory=list)
    in_flight_after_segments: list[int] = field(default_factory=list)
    rss_mb: dict[str, float] = field(default_factory=dict)
    rss_after_rounds_mb: list[float] = field(default_factory=list)
    exit_code: int | None = None
    stop_s: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems and self.exit_code == 0

    @property
    def rss_growth(self) -> float:
        return self.rss_mb["load_last_quarter"] / self.rss_mb["load_first_quarter"] - 1


def run_burst(client: httpx.Client, url: str, burst: Burst) -> tuple[list[tuple[Item, Outcome]], BurstReport]:
    """Fill the (idle) server: the long fillers run, the waiters wait; then send the refused ones."""
    done: list[tuple[Item, Outcome]] = []
    running = [threading.Event() for _ in burst.fillers]

    def go(request: Item, on_audio=None) -> None:
        done.append((request, send(client, request, on_audio)))
        if on_audio is not None:  # a long request that failed: no need to wait for its audio
            on_audio()

    threads = [threading.Thread(target=go, args=(f, e.set)) for f, e in zip(burst.fillers, running)]
    for thread in threads:
        thread.start()
    if not all(event.wait(START_S) for event in running):
        raise RuntimeError("the long requests of a burst sent no audio")
    threads += [threading.Thread(target=go, args=(w,)) for w in burst.waiters]
    for thread in threads[len(burst.fillers) :]:
        thread.start()
    before, _ = settle(url, len(burst.fillers) + len(burst.waiters))
    with ThreadPoolExecutor(max(1, len(burst.refused))) as pool:  # all at once, while the queue is full
        refused = list(zip(burst.refused, pool.map(lambda r: send(client, r), burst.refused)))
    report = BurstReport(before, in_flight(url))
    for thread in threads:
        thread.join()
    # The queue was full throughout if no long request ended before the last refusal came back.
    last_refused = max((o.ended for _, o in refused if o.status == 503), default=0.0)
    fillers = {id(f) for f in burst.fillers}
    report.filler_ended_early = any(o.ended < last_refused for r, o in done if id(r) in fillers)
    return done + refused, report


def percentiles(values: list[float]) -> dict[str, float]:
    ranked = sorted(values)
    if not ranked:
        return {}
    return {f"p{q}": ranked[max(0, math.ceil(q / 100 * len(ranked)) - 1)] for q in (50, 99)}


def run_load(
    requests: int = 500,
    concurrency: int = 32,
    bad: float = 0.10,
    hangups: float = 0.05,
    queue_full: float = 0.05,
    max_batch: int = 8,
    max_queue: int | None = None,
    threads: int = 1,
    rounds: int = 1,
    seed: int = 0,
    log: Path | None = None,
) -> LoadReport:
    if max_queue is None:
        max_queue = max(1, concurrency - max_batch + QUEUE_MARGIN)
    if max_batch + max_queue <= concurrency:
        raise ValueError(
            f"--max-batch {max_batch} + --max-queue {max_queue} must exceed --concurrency {concurrency}: "
            "the steady load must never fill the queue (only the bursts do)"
        )
    counts(requests, bad, hangups, queue_full, max_batch + max_queue)  # too few requests: ValueError, no server
    report = LoadReport(requests, concurrency, max_batch, max_queue, threads, rounds)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = log or Path(os.environ.get("TMPDIR", "/tmp")) / f"moss-serve-load-{port}.log"
    options = ["--max-batch", str(max_batch), "--max-queue", str(max_queue), "--threads", str(threads)]
    process = start_server(port, log, *options)
    outcomes: list[tuple[Item, Outcome]] = []
    try:
        wait_healthy(url, process)
        room = max_batch + max_queue + 4  # a burst holds the whole server, plus the refused ones
        limits = httpx.Limits(max_connections=room, max_keepalive_connections=room)
        with RssSampler(process.pid) as rss, httpx.Client(base_url=url, timeout=120, limits=limits) as client:
            rss.phase = "reference"
            start = time.perf_counter()
            plan = plan_load(requests, bad, hangups, queue_full, max_batch, max_queue, seed, find_long(client))
            everything = (i for part in plan for i in (part if isinstance(part, list) else part.fillers + part.waiters))
            goods = {i.content: i for i in everything if i.kind == "good"}
            alone = {content: send(client, i) for content, i in goods.items()}  # one at a time
            report.reference_s = time.perf_counter() - start
            rss.phase = "load"
            for _ in range(rounds):  # more rounds: a longer run, to see whether memory keeps growing
                start = time.perf_counter()
                for part in plan:
                    if isinstance(part, Burst):
                        done, burst = run_burst(client, url, part)
                        outcomes += done
                        report.bursts.append(burst)
                        continue
                    with ThreadPoolExecutor(concurrency) as pool:
                        outcomes += zip(part, pool.map(lambda i: send(client, i), part))
                    report.in_flight_after_segments.append(settle(url)[0])
                report.round_walls_s.append(time.perf_counter() - start)
                report.rss_after_rounds_mb.append(rss.rss())
            rss.phase = "end"
            time.sleep(0.5)  # a few samples after the load
        judge(report, outcomes, alone)
        load = rss.of("load") or [float("nan")]
        quarter = max(1, len(load) // 4)
        report.rss_mb = {
            "start": rss.of("start")[0],
            "after_reference": (rss.of("reference") or [float("nan")])[-1],
            "peak": max(rss for _, rss in rss.samples),
            "load_first_quarter": statistics.mean(load[:quarter]),
            "load_last_quarter": statistics.mean(load[-quarter:]),
            "end": (rss.of("end") or load)[-1],
        }
        if not report.rss_growth <= RSS_GROWTH:
            report.problems.append(f"RSS grew {report.rss_growth:+.1%} from the first to the last quarter")
        after = report.rss_after_rounds_mb
        if rounds > 1 and not after[-1] <= after[0] * (1 + RSS_GROWTH):
            report.problems.append(f"RSS grew from {after[0]:.1f} MB after round 1 to {after[-1]:.1f} MB")
    finally:
        report.exit_code, report.stop_s = stop_server(process)
    if report.exit_code != 0:
        report.problems.append(f"SIGTERM: exit {report.exit_code}, not 0")
    return report


def judge(report: LoadReport, outcomes: list[tuple[Item, Outcome]], alone: dict[bytes, Outcome]) -> None:
    """Count each class, and name every request that did not get what its class must get."""
    for kind in CLASSES:
        report.sent[kind], report.passed_by_class[kind], report.statuses[kind] = 0, 0, {}
    for request, outcome in outcomes:
        kind = request.kind
        report.sent[kind] += 1
        report.statuses[kind][outcome.status] = report.statuses[kind].get(outcome.status, 0) + 1
        wrong = what_is_wrong(request, outcome, alone)
        if wrong is None:
            report.passed_by_class[kind] += 1
        elif len(report.problems) < 20:  # the first ones name the request; the table counts them all
            report.problems.append(f"{kind} request {request.what or request.content[:80]!r}: {wrong}")
    for kind in CLASSES:
        if report.passed_by_class[kind] != report.sent[kind]:
            report.problems.append(f"{report.sent[kind] - report.passed_by_class[kind]} {kind} request(s) wrong")
    good = [o for r, o in outcomes if r.kind == "good" and o.status == 200]
    report.latency_s = percentiles([o.seconds for o in good])
    first = [o.first_audio_s for r, o in outcomes if r.kind == "good" and r.body.get("stream") and o.first_audio_s]
    report.first_audio_s, report.streamed = percentiles(first), len(first)
    report.max_batch_seen = max((o.batch_seen for o in good), default=0)
    if report.max_batch_seen < 2:
        report.problems.append("no request shared the batch with another")
    leaked = [n for n in report.in_flight_after_segments if n]
    if leaked:
        report.problems.append(f"/health still showed {leaked} in flight {SETTLE_S:.0f} s after a segment's load")
    full = report.max_batch + report.max_queue
    for k, burst in enumerate(report.bursts):
        if burst.in_flight_before != full:
            report.problems.append(f"burst {k + 1}: {burst.in_flight_before} in flight, not {full}: queue not full")
        if burst.filler_ended_early:
            report.problems.append(f"burst {k + 1}: a long request ended before the refused ones (too slow here?)")


def what_is_wrong(request: Item, outcome: Outcome, alone: dict[bytes, Outcome]) -> str | None:
    status = outcome.status
    if request.kind == "good":
        if status != 200:
            return f"got {status or outcome.error}"
        if alone[request.content].status != 200:
            return f"alone it got {alone[request.content].status}"
        if outcome.pcm_sha256 != alone[request.content].pcm_sha256:
            return "its PCM differs from its PCM alone"
    elif request.kind == "malformed":
        if not 400 <= status < 500:
            return f"got {status}, not a 4xx"
        if not outcome.error_shaped:
            return "its error is not in the API's JSON shape"
    elif request.kind == "hang-up":
        if status != 200 or outcome.first_audio_s is None:
            return f"got {status} and {'some' if outcome.first_audio_s else 'no'} audio before hanging up"
    else:  # queue-full
        if status != 503:
            return f"got {status}, not 503 (the queue was full)"
        if not outcome.retry_after:
            return "a 503 without Retry-After"
        if not outcome.error_shaped:
            return "its error is not in the API's JSON shape"
    return None


def print_report(report: LoadReport) -> None:
    r = report
    print(
        f"moss serve load test: {r.requests} requests x {r.rounds} round(s) at concurrency {r.concurrency}; "
        f"server --max-batch {r.max_batch} --max-queue {r.max_queue} --threads {r.threads}"
    )
    expected = {
        "good": "200 + its PCM alone",
        "malformed": "4xx + error JSON",
        "hang-up": "200, cut after audio",
        "queue-full": "503 + Retry-After",
    }
    print(f"  {'class':<11} {'sent':>5} {'right':>6}  {'expected':<21} statuses")
    for kind in CLASSES:
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(r.statuses.get(kind, {}).items())) or "-"
        sent, right = r.sent.get(kind, 0), r.passed_by_class.get(kind, 0)
        print(f"  {kind:<11} {sent:>5} {right:>6}  {expected[kind]:<21} {statuses}")
    print(f"  reference (each good body alone, one at a time): {r.reference_s:.1f} s")
    walls = ", ".join(f"{w:.1f}" for w in r.round_walls_s)
    total = sum(r.sent.values())
    print(f"  load: {walls} s wall per round, {total / max(sum(r.round_walls_s), 1e-9):.1f} requests/s")
    lat, first = r.latency_s, r.first_audio_s
    if lat:
        together = f"most in the batch together {r.max_batch_seen}"
        print(f"  good latency: p50 {lat['p50']:.3f} s, p99 {lat['p99']:.3f} s; {together}")
    if first:
        print(
            f"  streamed good, time to first audio: p50 {first['p50']:.3f} s, p99 {first['p99']:.3f} s (n={r.streamed})"
        )
    bursts = ", ".join(
        f"{n} x {b} -> {a}" for (b, a), n in Counter((b.in_flight_before, b.in_flight_after) for b in r.bursts).items()
    )
    print(f"  bursts, in flight (/health) before -> after the refused ones: {bursts or 'none'}")
    after = ", ".join(f"{n} x {count}" for count, n in Counter(r.in_flight_after_segments).items())
    print(f"  in flight (/health) after each segment's load: {after}")
    m = r.rss_mb
    if m:
        print(
            f"  RSS MB: start {m['start']:.1f}, after reference {m['after_reference']:.1f}, peak {m['peak']:.1f}, "
            f"load first quarter {m['load_first_quarter']:.1f} -> last quarter {m['load_last_quarter']:.1f} "
            f"({r.rss_growth:+.1%}), end {m['end']:.1f}"
        )
    if r.rounds > 1:
        print(f"  RSS MB after each round: {', '.join(f'{x:.1f}' for x in r.rss_after_rounds_mb)}")
    print(f"  shutdown: SIGTERM -> exit {r.exit_code} in {r.stop_s:.2f} s")
    for problem in r.problems:
        print(f"  problem: {problem}")
    print("PASS" if r.passed else "FAIL")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--bad", type=float, default=0.10, help="share of malformed bodies")
    parser.add_argument("--hangups", type=float, default=0.05, help="share of streams hung up after their first audio")
    parser.add_argument("--queue-full", type=float, default=0.05, help="share sent while the queue is full")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--max-queue", type=int, default=None, help="default: concurrency - max-batch + 4")
    parser.add_argument("--threads", type=int, default=1, help="the server's torch threads (moss serve --threads)")
    parser.add_argument("--rounds", type=int, default=1, help="send the whole load this many times")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        report = run_load(
            args.requests,
            args.concurrency,
            args.bad,
            args.hangups,
            args.queue_full,
            args.max_batch,
            args.max_queue,
            args.threads,
            args.rounds,
            args.seed,
        )
    except ValueError as e:
        parser.error(str(e))
    print_report(report)
    sys.exit(0 if report.passed else 1)


if __name__ == "__main__":
    main()
