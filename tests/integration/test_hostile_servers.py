"""Every `--server` command against a broken or hostile server ends within its deadline, with bounded
memory and a one-line error, and writes nothing for the request: an endless WAV stream, a 2 GB
Content-Length sent a byte a second, a chunked answer that never ends, a 50 MB error message, a WAV
whose header lies about its size, a redirect, and audio longer than the request's frame budget
(`remote/bounds.py`)."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from cli_runs import flat, moss, write_rows  # tests/ is on sys.path
from speech_servers import hostile

FRAMES = 4  # the request's budget: its answer may hold 4 frames of audio, in at most ~1.1 MB


def _requests(folder: Path) -> Path:
    return write_rows(folder / "r.jsonl", [{"id": "r1", "text": "Hello there.", "seed": 1, "max_new_frames": FRAMES}])


def _synth(url: str, tmp_path: Path, *options) -> tuple[int, str, float]:
    began = time.monotonic()
    out = tmp_path / "out"
    result = moss(
        "synth", _requests(tmp_path), "--server", url, "--timeout", "2", "--retries", "0", "-o", out, *options
    )
    assert not list(out.glob("**/*.wav")), "no audio is written for an answer refused"
    return result.exit_code, flat(result.output), time.monotonic() - began


@pytest.mark.parametrize(
    ("kind", "said", "within_s"),
    [
        ("trickle", "Content-Length 2000000000: more than 1171456 bytes", 5),
        ("huge-error", """HTTP 400 Bad Request: '{"error": {"message": "xxxxxxxx""", 10),
        ("lying-wav", "a WAV whose header gives 2147483656 bytes in all, in a body of 1001 bytes", 5),
        (
            "redirect",
            "HTTP 302 Found: a redirect, not followed (give --server the address it points to): "
            "http://127.0.0.1:9/elsewhere?token=***",
            5,
        ),  # fmt: skip
        ("too-long", "8.00 s of audio, more than the 4 frames the request allows make (0.32 s", 5),
        # No Content-Length and a byte a second: the deadline, --timeout (2 s) and a second per frame (4).
        ("trickle-chunked", "the whole answer took longer than 6 s (--timeout and 4 frames at a second each", 12),
    ],
)
def test_synth_ends_with_a_one_line_error(kind, said, within_s, tmp_path):
    with hostile(kind) as url:
        code, output, took = _synth(url, tmp_path)
    assert code == 2 and "Traceback" not in output, output
    assert said in output, output
    assert took < within_s, f"{kind}: {took:.1f} s"
    assert "s3cr3t" not in output and len(output) < 800, output  # a server's words cut to a readable length


def test_the_deadline_is_settable(tmp_path):
    with hostile("trickle-chunked") as url:
        code, output, took = _synth(url, tmp_path, "--deadline", "1.5")
    assert code == 2 and "the whole answer took longer than 1.5 s (--deadline)" in output, output
    assert took < 6


def test_an_endless_stream_is_cut_at_the_budget_with_memory_bounded(tmp_path):
    tracemalloc.start()
    try:
        with hostile("endless-wav") as url:
            code, output, took = _synth(url, tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 2 and "more than 1171456 bytes" in output and "the answer is not read further" in output, output
    assert took < 10 and peak < 64 << 20, (took, peak)


@pytest.mark.parametrize("command", ["audit-determinism", "bench"])
def test_the_audit_and_the_bench_share_the_bounds(command, tmp_path):
    requests = ["--requests", _requests(tmp_path)] if command == "bench" else [_requests(tmp_path)]
    args = ["--scenarios", "repeat"] if command == "audit-determinism" else ["--concurrency", "1", "--path", "single"]
    with hostile("endless-wav") as url:
        began = time.monotonic()
        result = moss(command, *requests, "--server", url, "--timeout", "2", *args)
    output = flat(result.output)
    assert result.exit_code == 2 and "the answer is not read further" in output and "Traceback" not in output, output
    assert time.monotonic() - began < 15
