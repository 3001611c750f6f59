"""A cancelled request leaves the engine at once (a server whose client went away), and nothing
else changes: the others' codes are bitwise those of the run without it, its slot is free again."""

import torch

from moss_cli.engine.requests import FrameEvent, GenerationRequest, GenerationResult
from moss_cli.engine.scheduler import Engine
from moss_cli.sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS


def _requests(talker, count: int = 3, frames: int = 12) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            str(i),
            talker.prompt(f"request number {i} " * (i + 1)),
            frames,
            AUDIO_DEFAULTS,
            STOP_HEAD_DEFAULTS,
            rng=i,
            ignore_stop=True,
        )
        for i in range(count)
    ]


def _results(engine: Engine, requests, cancelled=None, cancel_after: dict[str, int] | None = None):
    """Each request's result; `cancel_after[key] = n` cancels `key` once it has produced n frames."""
    gone: set[str] = set(cancelled or ())
    made: dict[str, int] = {}
    results = {}
    for event in engine.events(requests, cancelled=gone.__contains__):
        if isinstance(event, FrameEvent):
            made[event.key] = made.get(event.key, 0) + 1
            if (cancel_after or {}).get(event.key) == made[event.key]:
                gone.add(event.key)
        elif isinstance(event, GenerationResult):
            results[event.key] = event
    return results


def test_a_cancelled_request_stops_before_the_next_step_and_the_others_are_unchanged(talker32):
    plain = _results(Engine(talker32.model, max_batch=3), _requests(talker32))
    engine = Engine(talker32.model, max_batch=3)
    cut = _results(engine, _requests(talker32), cancel_after={"1": 5})
    assert cut["1"].cancelled and cut["1"].codes.shape[0] == 5
    assert torch.equal(cut["1"].codes, plain["1"].codes[:5])  # what it made until then
    for key in ("0", "2"):
        assert not cut[key].cancelled and torch.equal(cut[key].codes, plain[key].codes), key
    assert sorted(engine.pool.free) == list(range(1, len(engine.pool.lengths)))  # every slot back


def test_a_request_cancelled_while_waiting_is_never_admitted_and_frees_its_place(talker32):
    requests = _requests(talker32)
    engine = Engine(talker32.model, max_batch=2)
    results = _results(engine, requests, cancelled={"0"})
    assert results["0"].cancelled and results["0"].codes.shape == (0, talker32.model.cfg.n_vq)
    assert results["1"].first_step == results["2"].first_step == 0  # "2" took the place "0" left
    assert len(engine.pool.lengths) == 3  # scratch and two slots: "0" never had one


def test_a_cancelled_request_comes_back_without_audio_and_the_others_are_decoded_as_usual():
    from moss_cli.config.requests import Request
    from moss_cli.pipeline import Synthesizer, SynthOptions

    synth = Synthesizer(SynthOptions(device="cpu"))
    requests = [Request(id=f"r{i}", text=f"Sentence number {i}.", line=i + 1, seed=i) for i in range(3)]
    alone = {r.request.id: r for r in synth.run(synth.prepare(requests))}
    for stream in (False, True):
        results = {
            r.request.id: r for r in synth.run(synth.prepare(requests), stream=stream, cancelled={"r1"}.__contains__)
        }
        assert results["r1"].stop_reason == "cancelled" and results["r1"].pcm.shape[0] == 0, stream
        for key in ("r0", "r2"):
            assert results[key].stop_reason == alone[key].stop_reason != "cancelled"
            assert results[key].pcm.tobytes() == alone[key].pcm.tobytes(), (key, stream)
