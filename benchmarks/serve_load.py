"""Load test for `moss serve`: many requests at once, some of them malformed, against a real
`moss serve` process (the tiny model).

    python benchmarks/serve_load.py [--requests 200] [--concurrency 16] [--bad 0.05] [--max-batch 8] [--rounds 1]

First every good request is sent alone, one at a time (the reference); then all requests go at
`--concurrency` in flight, the bad ones mixed in. Every good request must get 200 and exactly the
PCM it got alone (some stream, some ask for pcm or flac); every bad one a 4xx; SIGTERM must stop
the server with exit 0. The server's RSS is sampled all along: at start, after the reference run,
its peak and its end, the first and last quarter of the load phase, and after each of `--rounds`
repetitions of the load (flat: no growth trend).
Exit code 1 if anything was wrong.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

HERE = Path(__file__).resolve().parent.parent
SPEECH, HEALTH = "/v1/audio/speech", "/health"
START_S, STOP_S = 120.0, 60.0  # bounded waits for the server to come up and to go down
WORDS = "the quick brown fox jumps over a lazy dog while rain falls softly on the quiet town".split()


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
        body["stream"] = True
    return body


BAD = [  # (body bytes, what it is); each must get a 4xx
    (b'{"input": "unterminated', "malformed JSON"),
    (json.dumps({"input": "x", "seed": "12"}).encode(), "seed of the wrong type"),
    (json.dumps({"input": "x", "audio_top_p": 7}).encode(), "audio_top_p out of range"),
    (json.dumps({"input": "x", "temperature": 0.7}).encode(), "a field vllm-omni drops"),
    (json.dumps({"input": "x", "colour": "red"}).encode(), "unknown field"),
    (json.dumps({"input": "x", "ref_audio": "/etc/passwd"}).encode(), "path reference"),
    (json.dumps({"input": "x", "ref_audio": "http://127.0.0.1:9/a.wav"}).encode(), "URL reference"),
    (json.dumps({"input": "a" * 100_000}).encode(), "text too long"),
    (json.dumps([{"input": "x"}]).encode(), "not an object"),
]


@dataclass
class Outcome:
    status: int
    pcm_sha256: str | None = None
    in_flight: int = 0
    seconds: float = 0.0


def send(client: httpx.Client, content: bytes, body: dict | None) -> Outcome:
    """One request; the PCM hash of its audio (decoded from wav / flac / pcm, streamed or not)."""
    start = time.perf_counter()
    with client.stream("POST", SPEECH, content=content, headers={"content-type": "application/json"}) as response:
        data = response.read()
    seconds = time.perf_counter() - start
    if response.status_code != 200 or body is None:
        return Outcome(response.status_code, seconds=seconds)
    channels = int(response.headers["x-moss-channels"])
    if body["response_format"] == "pcm":
        pcm = np.frombuffer(data, dtype="<i2")
    elif body.get("stream"):  # a streaming WAV: a 44-byte header whose sizes say "unknown", then samples
        pcm = np.frombuffer(data[44:], dtype="<i2")
    else:
        pcm = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)[0].reshape(-1)
    assert pcm.size % channels == 0
    in_flight = int(response.headers.get("x-moss-max-in-flight", 0))  # not sent when streaming
    return Outcome(200, hashlib.sha256(pcm.astype("<i2").tobytes()).hexdigest(), in_flight, seconds)


@dataclass
class LoadReport:
    requests: int
    good: int
    bad: int
    concurrency: int
    wall_s: float
    reference_s: float
    ok: int = 0
    mismatched: list[int] = field(default_factory=list)
    failed_good: list[tuple[int, int]] = field(default_factory=list)
    bad_statuses: dict[str, int] = field(default_factory=dict)
    bad_not_4xx: list[tuple[str, int]] = field(default_factory=list)
    max_in_flight: int = 0
    latency_p50_s: float = 0.0
    latency_p95_s: float = 0.0
    rss_mb: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    stop_s: float = 0.0
    rounds: int = 1
    round_walls_s: list[float] = field(default_factory=list)
    rss_after_rounds_mb: list[float] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not (self.mismatched or self.failed_good or self.bad_not_4xx) and self.exit_code == 0


def run_load(
    requests: int = 200,
    concurrency: int = 16,
    bad_share: float = 0.05,
    max_batch: int = 8,
    seed: int = 0,
    log: Path | None = None,
    rounds: int = 1,
) -> LoadReport:
    rng = random.Random(seed)
    bad_count = round(requests * bad_share)
    bad_at = set(rng.sample(range(requests), bad_count))
    plan: list[tuple[bytes, dict | None, str]] = []
    for i in range(requests):
        if i in bad_at:
            content, what = BAD[len([j for j in bad_at if j < i]) % len(BAD)]
            plan.append((content, None, what))
        else:
            body = good_body(i, rng)
            plan.append((json.dumps(body).encode(), body, "good"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = log or Path(os.environ.get("TMPDIR", "/tmp")) / f"moss-serve-load-{port}.log"
    process = start_server(port, log, "--max-batch", str(max_batch))
    try:
        wait_healthy(url, process)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        with RssSampler(process.pid) as rss, httpx.Client(base_url=url, timeout=120, limits=limits) as client:
            rss.phase = "reference"
            start = time.perf_counter()
            alone = {i: send(client, content, body) for i, (content, body, _) in enumerate(plan) if body is not None}
            reference_s = time.perf_counter() - start
            rss.phase = "load"
            outcomes, walls, after_rounds = [], [], []
            for _ in range(rounds):  # more rounds: a longer run, to see whether memory keeps growing
                start = time.perf_counter()
                with ThreadPoolExecutor(concurrency) as pool:
                    outcomes += pool.map(lambda p: send(client, p[0], p[1]), plan)
                walls.append(time.perf_counter() - start)
                after_rounds.append(rss.rss())
            rss.phase = "end"
            time.sleep(0.5)  # a few samples after the load
        report = LoadReport(requests, requests - bad_count, bad_count, concurrency, walls[0], reference_s)
        report.rounds, report.round_walls_s, report.rss_after_rounds_mb = rounds, walls, after_rounds
        for n, ((_, body, what), outcome) in enumerate(zip(plan * rounds, outcomes)):
            i = n % requests
            if body is None:
                report.bad_statuses[str(outcome.status)] = report.bad_statuses.get(str(outcome.status), 0) + 1
                if not 400 <= outcome.status < 500:
                    report.bad_not_4xx.append((what, outcome.status))
            elif outcome.status != 200 or alone[i].status != 200:
                report.failed_good.append((i, outcome.status))
            elif outcome.pcm_sha256 != alone[i].pcm_sha256:
                report.mismatched.append(i)
            else:
                report.ok += 1
        report.max_in_flight = max(o.in_flight for o in outcomes)
        latencies = sorted(o.seconds for o, (_, body, _) in zip(outcomes, plan * rounds) if body is not None)
        report.latency_p50_s = statistics.median(latencies)
        report.latency_p95_s = latencies[int(0.95 * (len(latencies) - 1))]
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
    finally:
        report_code = stop_server(process)
    report.exit_code, report.stop_s = report_code
    return report


def print_report(report: LoadReport) -> None:
    r = report
    print(
        f"moss serve load test: {r.requests} requests ({r.good} good, {r.bad} malformed) at concurrency {r.concurrency}"
    )
    print(f"  reference (each good request alone, one at a time): {r.reference_s:.2f} s")
    print(
        f"  load: {r.wall_s:.2f} s wall, {r.requests / r.wall_s:.1f} req/s, latency p50 {r.latency_p50_s:.3f} s "
        f"p95 {r.latency_p95_s:.3f} s, most requests in flight together {r.max_in_flight}"
    )
    print(
        f"  good: {r.ok}/{r.good * r.rounds} got 200 and exactly their audio alone; mismatched {r.mismatched}; "
        f"failed {r.failed_good}"
    )
    print(f"  bad: statuses {r.bad_statuses}; not 4xx {r.bad_not_4xx}")
    m = r.rss_mb
    print(
        f"  RSS MB: start {m['start']:.1f}, after reference {m['after_reference']:.1f}, peak {m['peak']:.1f}, "
        f"load first quarter {m['load_first_quarter']:.1f} -> last quarter {m['load_last_quarter']:.1f}, "
        f"end {m['end']:.1f}"
    )
    if r.rounds > 1:
        walls = ", ".join(f"{w:.2f}" for w in r.round_walls_s)
        after = ", ".join(f"{m:.1f}" for m in r.rss_after_rounds_mb)
        print(f"  {r.rounds} rounds of the load: wall s {walls}; RSS MB after each {after}")
    print(f"  shutdown: SIGTERM -> exit {r.exit_code} in {r.stop_s:.2f} s")
    print("PASS" if r.passed else "FAIL")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--bad", type=float, default=0.05, help="share of malformed bodies")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1, help="send the whole load this many times")
    args = parser.parse_args()
    report = run_load(args.requests, args.concurrency, args.bad, args.max_batch, args.seed, rounds=args.rounds)
    print_report(report)
    sys.exit(0 if report.passed else 1)


if __name__ == "__main__":
    main()
