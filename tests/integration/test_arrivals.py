"""Live arrivals: requests put from another thread join the running batch, and each gets the
codes and PCM it gets alone."""

import threading
import time

import pytest
import torch

from moss_cli.config.requests import Request
from moss_cli.engine.arrivals import Arrivals
from moss_cli.pipeline import Synthesizer, SynthOptions


@pytest.fixture(scope="module")
def synth():
    return Synthesizer(SynthOptions(device="cpu"))


def _requests(count):
    return [Request(id=f"r{i}", text=f"live request number {i}", line=i + 1, seed=100 + i) for i in range(count)]


def test_arrivals_from_another_thread_join_the_running_batch_and_match_running_alone(synth):
    prepared = synth.prepare(_requests(5))
    alone = {r.request.id: r for p in prepared for r in synth.run([p], max_batch=1)}
    arrivals: Arrivals = Arrivals()

    def producer():
        for p in prepared:
            arrivals.put(p)
            time.sleep(0.01)
        arrivals.close()

    thread = threading.Thread(target=producer)
    thread.start()
    live = {r.request.id: r for r in synth.run(arrivals, max_batch=4)}
    thread.join(timeout=30)
    assert sorted(live) == sorted(alone)
    for key, result in live.items():
        assert torch.equal(result.codes, alone[key].codes), key
        assert result.pcm.tobytes() == alone[key].pcm.tobytes(), key
    assert max(r.batch_size_seen for r in live.values()) > 1  # they really ran together


def test_an_idle_engine_waits_for_arrivals_instead_of_ending(synth):
    prepared = synth.prepare(_requests(2))
    arrivals: Arrivals = Arrivals()
    results = []
    worker = threading.Thread(target=lambda: results.extend(synth.run(arrivals, max_batch=2)))
    worker.start()
    time.sleep(0.2)  # the engine idles on an empty source
    assert worker.is_alive()
    arrivals.put(prepared[0])
    arrivals.put(prepared[1])
    arrivals.close()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert sorted(r.request.id for r in results) == ["r0", "r1"]


def test_arrivals_refuse_requests_after_close():
    arrivals: Arrivals = Arrivals()
    arrivals.close()
    with pytest.raises(RuntimeError):
        arrivals.put(object())
    assert list(arrivals) == []


def test_a_finished_request_is_delivered_while_the_source_stays_open(synth):
    """A long-running engine (moss serve, a Ray worker) never closes its source: each result must
    come out when it is done, not when a later request finishes or the source closes."""
    prepared = synth.prepare(_requests(2))
    arrivals: Arrivals = Arrivals()
    results = []
    worker = threading.Thread(target=lambda: results.extend(synth.run(arrivals, max_batch=2)), daemon=True)
    worker.start()
    arrivals.put(prepared[0])
    arrivals.put(prepared[1])
    deadline = time.monotonic() + 30
    while len(results) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(r.request.id for r in results) == ["r0", "r1"]
    assert worker.is_alive()  # still open for more
    arrivals.close()
    worker.join(timeout=30)
