"""An engine fixes its layout once, as it is built, on the thread that runs it; what a run records
(`engine_steps`, `prefill`, `linear_kernel`, `codec_tiles`) is read from that layout, never probed
again, so the environment written down is the layout the numbers were computed in."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from moss_cli.engine.scheduler import Engine
from moss_cli.numerics import FAST, INVARIANT, probes
from moss_cli.numerics.layout import EngineLayout, recorded
from moss_cli.pipeline import Synthesizer, SynthOptions
from moss_cli.pipeline.environment import environment
from moss_cli.pipeline.live import LiveEngine


def _record_probes(monkeypatch) -> list[str]:
    """The names of the threads the engine's probes run on, from now on."""
    threads: list[str] = []
    for name in ("one_block_is_invariant", "linears_agree"):
        probe = getattr(probes, name)

        def recording(*args, probe=probe, **kwargs):
            threads.append(threading.current_thread().name)
            return probe(*args, **kwargs)

        monkeypatch.setattr(probes, name, recording)
    return threads


def _forbid_probes(monkeypatch) -> None:
    def probed_again(*args, **kwargs):
        raise AssertionError("the layout was probed again")

    for name in ("one_block_is_invariant", "linears_agree", "rows_agree"):
        monkeypatch.setattr(probes, name, probed_again)


def test_the_server_reports_the_layout_its_engine_thread_fixed_without_probing_again(monkeypatch):
    synth = Synthesizer(SynthOptions(device="cpu", max_batch=4))
    synth.load()  # the codec fixes its tiles as it loads
    probed_on = _record_probes(monkeypatch)
    service = LiveEngine(synth)
    service.start()
    try:
        assert probed_on and set(probed_on) == {"moss-engine"}  # under the engine thread's count
        layout = synth.layout
        _forbid_probes(monkeypatch)
        with ThreadPoolExecutor(1) as asking:  # as an HTTP handler's thread asks
            served = asking.submit(service.environment).result()
        assert {k: served[k] for k in recorded(layout, synth.codec.tiles)} == recorded(layout, synth.codec.tiles)
        assert served["engine_steps"] == str(layout.steps) != "unpadded"
        assert synth.engine(4).layout is layout  # every run of the server's engine uses it
    finally:
        assert service.close(30)


def test_a_local_run_records_the_layout_its_engine_was_built_with(monkeypatch):
    synth = Synthesizer(SynthOptions(device="cpu"))
    synth.load()  # the codec fixes its tiles as it loads
    engine = synth.engine()
    assert engine.layout is synth.layout and synth.engine().layout is engine.layout  # fixed once
    _forbid_probes(monkeypatch)
    env = environment(synth, checkpoints={"talker": "t", "codec": "c"})
    assert env["engine_steps"] == str(engine.layout.steps)
    assert env["linear_kernel"] == ("onednn-packed" if synth.talker.packed else "plain")
    assert env["codec_tiles"] == str(synth.codec.tiles)


def test_an_engine_takes_a_layout_for_any_batch(talker32):
    """A synthesizer's engines share its layout whatever their batch (a request alone computes in
    the blocks it shares with others); the layout carries the numerics and compile setting it was
    fixed for, so an engine takes nothing that could disagree with it."""
    layout = EngineLayout.fix(talker32.model, INVARIANT, 8)
    assert Engine(talker32.model, max_batch=100, layout=layout).layout is layout
    assert Engine(talker32.model, max_batch=1, layout=layout).layout is layout
    compiled = replace(layout, compile=True)  # as fixed for a compiled frame
    with pytest.raises(ValueError, match="packed"):
        Engine(talker32.model, max_batch=8, layout=compiled)
    assert str(EngineLayout.fix(talker32.model, FAST, 8).steps) == "unpadded"
