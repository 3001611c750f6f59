"""The range of every numeric option, in one place. Each option's `callback` is its `Range`: a value
that is NaN, infinite (except where infinity means something: --request-rate inf) or outside the
range is refused as Typer refuses any bad option value, naming the option and the range (exit 2),
before anything loads or is sent. Comma-separated lists of numbers (bench's --batch and
--concurrency) are checked against the same ranges."""

from __future__ import annotations

import math
from dataclasses import dataclass

import typer

from ..config.request_fields import MAX_FRAMES_LIMIT

MAX_WAIT_S = 86_400  # a day: no request, run or load test has a reason to wait longer for anything


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    above: bool = False  # `low` itself is excluded (a time of 0 s means nothing)
    infinite: str | None = None  # what `inf` means, where it is allowed

    @property
    def words(self) -> str:
        low, high = _plain(self.low), _plain(self.high)
        span = f"above {low} and at most {high}" if self.above else f"from {low} to {high}"
        return span + (f", or inf ({self.infinite})" if self.infinite else "")

    def problem(self, value: float) -> str | None:
        """Why `value` is refused, or None where it is in range."""
        if math.isinf(value) and value > 0 and self.infinite:
            return None
        if not math.isfinite(value):
            return f"expected a number {self.words}, got {value}"
        if value < self.low or (self.above and value == self.low) or value > self.high:
            return f"must be {self.words}, got {_plain(value)}"
        return None

    def __call__(self, value):
        """The option's Typer callback: its value, or a usage error that names the option."""
        if value is not None and (problem := self.problem(value)) is not None:
            raise typer.BadParameter(problem)
        return value


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


BATCH = Range(1, 4096)  # requests in flight at once: --max-batch, bench --batch, --concurrency
THREADS = Range(1, 1024)
WORKERS = Range(1, 1024)
GPUS_PER_WORKER = Range(0, 64)
CPUS_PER_WORKER = Range(0.01, 1024)
PORT = Range(0, 65535)  # 0: any free port
QUEUE = Range(1, 1_000_000)
SECONDS = Range(0, MAX_WAIT_S, above=True)  # --timeout, serve's --request-timeout, bench's --duration
RETRIES = Range(0, 100)
SAMPLE_RATE = Range(1000, 768_000)  # Hz: from telephone speech to the highest studio rates
CHANNELS = Range(1, 64)
FRAMES = Range(2, MAX_FRAMES_LIMIT)  # a request file's max_new_frames takes no more either
REPEATS = Range(1, 1000)
REQUESTS = Range(1, 1_000_000)
WARMUP = Range(0, 1_000_000)
REQUEST_RATE = Range(0, 1_000_000, above=True, infinite="back to back")
# A request sent later than --timeout after another overlaps nothing of it (by then it has finished or
# failed), so a longer stagger tests nothing; the audit refuses one above the given --timeout, and no
# --timeout is above this.
STAGGER_MS = Range(0, MAX_WAIT_S * 1000)
# Two 16-bit PCM signals that differ at all stay below 190 dB (one step over a billion samples), so a
# higher threshold would pass identical audio only: that is --level bitwise.
SNR_DB = Range(0, 200)
# --level speech's thresholds (measures.speech.SpeechThresholds)
DTW_COST = Range(0, 2)  # a mean cosine distance
FRACTION = Range(0, 1)  # a ratio of durations, a share of samples, a spectral flatness
DBFS = Range(-200, 0)
FIT_RATIO = Range(0, 1000)  # a probability under one clip over the same under another


def integers(text: str, option: str, allowed: Range) -> tuple[int, ...]:
    """A comma-separated list of integers, each in `allowed` (a MossError naming `option` if not)."""
    from ..errors import MossError

    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or any(allowed.problem(value) for value in values):
        raise MossError(f"expected comma-separated integers {allowed.words}, got {text!r}", field=option)
    return values
