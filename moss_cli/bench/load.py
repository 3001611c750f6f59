"""Load on a speech server, as `vllm bench serve` makes it: requests at most `concurrency` in flight,
sent back to back (closed loop, `--request-rate inf`) or arriving as a Poisson process of a given rate
(exponential gaps, as vLLM's `get_request` with burstiness 1), for a count of requests or a duration;
and what each response's arrival tells: its end-to-end latency, time to first audio packet, real-time
factor and, streamed, whether a player fed by it would have run dry.

The definitions are vllm-omni's (paths: the vllm_omni package of its 0.30.0 wheel):
`audio_ttfp` is the time from sending to the first piece of audio received, `audio_rtf` the whole
response's latency over the audio's duration (metrics/definitions.py:386-395), the audio's duration its
samples over its rate (benchmarks/patch/patch.py:2640-2652); `audio_underrun` is the most a player
that starts at the first audio and plays in real time would be starved, checked as each later piece
arrives, and a stream is continuous where that stays within 0.1 s (benchmarks/audio_continuity.py:39-91,
metrics/definitions.py:343)."""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from ..remote.reply import Reply

CONTINUITY_THRESHOLD_S = 0.1  # vllm-omni's audible-gap budget (metrics/definitions.py:343)
ARRIVAL_SEED = 0  # Poisson gaps: the same schedule for every arm and level
SHOWN_NEIGHBOURS = 12  # a response's neighbours named in full; the rest counted


@dataclass
class Timing:
    """What one response's arrival tells, in vllm-omni's terms."""

    latency_s: float  # e2el: from sending to the whole body received
    audio_s: float  # audio_duration
    samples: int  # audio_frames in vllm-omni's sense: PCM sample frames (not codec frames)
    rtf: float  # audio_rtf: latency / audio duration (0 for no audio, as vllm-omni)
    ttfp_s: float | None = None  # audio_ttfp: streamed only
    underrun_s: float | None = None  # audio_underrun: streamed only
    underruns: int | None = None  # the pieces that came after the player ran dry
    continuity_ok: bool | None = None


def timing(reply: Reply, streamed: bool) -> Timing:
    samples = int(reply.pcm.shape[0])
    audio_s = samples / reply.sample_rate if reply.sample_rate else 0.0
    latency = reply.wall_s
    figures = Timing(latency, audio_s, samples, latency / audio_s if audio_s > 0 else 0.0)
    if not streamed or not reply.arrivals:
        return figures
    # The body's first bytes may be a header (a streamed WAV's): the audio is its last pcm.nbytes.
    header = reply.arrivals[-1][1] - reply.pcm.nbytes
    pieces = [(t, max(0, total - header)) for t, total in reply.arrivals]
    audio = [(t, total) for t, total in pieces if total > 0]
    if not audio:
        return figures
    start = audio[0][0]
    bytes_per_s = reply.sample_rate * reply.channels * reply.pcm.itemsize
    worst, events, before = 0.0, 0, audio[0][1]
    for t, total in audio[1:]:
        starved = (t - start) - before / bytes_per_s  # played so far minus received before this piece
        if starved > 0:
            worst, events = max(worst, starved), events + 1
        before = total
    figures.ttfp_s, figures.underrun_s, figures.underruns = start, worst, events
    figures.continuity_ok = worst <= CONTINUITY_THRESHOLD_S
    return figures


@dataclass
class Sent:
    """One request sent under load, and what came back."""

    index: int  # its place in the level's sequence
    start_s: float  # sent, from the start of the level's run
    end_s: float
    reply: Reply | None = None
    error: str | None = None
    neighbours: list[str] = field(default_factory=list)  # the others in flight at some moment while it was


@dataclass(frozen=True)
class Load:
    concurrency: int
    count: int | None  # requests to send, or None: for `duration_s`
    duration_s: float | None = None
    request_rate: float = math.inf  # requests per second, Poisson; inf: closed loop


async def drive(
    load: Load, send: Callable[[int], Awaitable[Reply]], failure: type[Exception]
) -> tuple[list[Sent], float]:
    """Send requests 0, 1, ... with `send(index)` under `load`; the sends in order and the run's wall
    seconds (first send to last answer). A `failure` raised by a send is kept as its error."""
    places = asyncio.Semaphore(load.concurrency)
    gaps = random.Random(ARRIVAL_SEED)
    begin = time.perf_counter()
    tasks: list[asyncio.Task] = []

    async def one(index: int, placed: bool) -> Sent:
        if not placed:
            await places.acquire()
        start = time.perf_counter() - begin
        try:
            reply = await send(index)
            return Sent(index, start, time.perf_counter() - begin, reply=reply)
        except failure as e:
            return Sent(index, start, time.perf_counter() - begin, error=str(e))
        finally:
            places.release()

    def more(index: int) -> bool:
        if load.count is not None:
            return index < load.count
        return time.perf_counter() - begin < load.duration_s

    arrival, index = 0.0, 0
    try:
        while more(index):
            if math.isinf(load.request_rate):  # closed loop: the next goes when a place is free
                await places.acquire()
                if not more(index):
                    places.release()
                    break
                tasks.append(asyncio.ensure_future(one(index, placed=True)))
            else:  # it arrives on schedule and waits for a place, as vLLM's bench does
                arrival += gaps.expovariate(load.request_rate)
                await asyncio.sleep(max(0.0, begin + arrival - time.perf_counter()))
                if load.count is None and not more(index):
                    break
                tasks.append(asyncio.ensure_future(one(index, placed=False)))
            index += 1
        sent = list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    wall = max((s.end_s for s in sent), default=0.0) - min((s.start_s for s in sent), default=0.0)
    return sent, wall


def name_neighbours(sent: list[Sent], label: Callable[[Sent], str]) -> None:
    """Each send's neighbours: the others in flight at some moment while it was."""
    ordered = sorted(sent, key=lambda s: s.start_s)
    for s in sent:
        others = [label(o) for o in ordered if o is not s and o.start_s < s.end_s and o.end_s > s.start_s]
        s.neighbours = others[:SHOWN_NEIGHBOURS] + (
            [f"and {len(others) - SHOWN_NEIGHBOURS} more"] if len(others) > SHOWN_NEIGHBOURS else []
        )
