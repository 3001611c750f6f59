"""benchmarks/serve_load.py, small: 60 requests against a real `moss serve` process, with malformed
bodies, streams hung up after their first audio, and requests sent while the queue is full (slow)."""

from __future__ import annotations

import pytest
from serve_helpers import serve_load

load = serve_load()


@pytest.mark.slow  # a real process: about 20 s on a quiet 2-core machine
def test_under_load_nothing_is_lost_hang_ups_free_their_places_and_a_full_queue_refuses(tmp_path):
    report = load.run_load(requests=60, concurrency=8, max_batch=4, log=tmp_path / "serve.log")
    load.print_report(report)
    assert report.max_queue == 8  # concurrency - max_batch + 4: the steady load never fills it
    assert report.sent == {"good": 48, "malformed": 6, "hang-up": 3, "queue-full": 3}
    # good: 200 and the PCM alone; malformed: 4xx in the error shape; hang-ups: audio, then cut;
    # queue-full: 503 with Retry-After
    assert report.passed_by_class == report.sent, report.problems
    assert report.statuses["queue-full"] == {503: 3}
    assert report.max_batch_seen > 1  # they really shared the batch
    [burst] = report.bursts
    assert burst.in_flight_before == 4 + 8  # the queue was full when the refused ones came
    assert report.in_flight_after_segments == [0, 0]  # the hung-up streams freed their places
    assert set(report.latency_s) == {"p50", "p99"} and report.first_audio_s
    assert report.rss_growth <= 0.05
    assert report.exit_code == 0
    assert report.passed, report.problems
