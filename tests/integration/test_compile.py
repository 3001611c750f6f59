"""`--compile`: the frame step as one torch.compile graph stays batch-invariant, records what the
audit needs, and reports its compile time. Compiling takes seconds, so these run in CI (slow)."""

import json
import random

import pytest
import torch
from typer.testing import CliRunner

from moss_cli.cli.app import app
from moss_cli.config.requests import Request
from moss_cli.engine.requests import GenerationRequest
from moss_cli.engine.scheduler import Engine
from moss_cli.numerics import INVARIANT
from moss_cli.numerics.layout import EngineLayout
from moss_cli.pipeline import Synthesizer, SynthOptions
from moss_cli.sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS

pytestmark = pytest.mark.slow
runner = CliRunner()


@pytest.fixture(scope="module")
def synth():
    return Synthesizer(SynthOptions(device="cpu", compile=True))


def test_compiled_requests_get_bitwise_the_codes_and_pcm_they_get_alone(synth):
    rng = random.Random(7)
    requests = [
        Request(id=f"r{i}", text=f"compiled request {i} " * rng.randint(1, 4), line=i + 1, seed=rng.choice([None, i]))
        for i in range(6)
    ]
    prepared = synth.prepare(requests)
    alone = {r.request.id: r for p in prepared for r in synth.run([p], max_batch=1)}
    mixed = list(prepared)
    rng.shuffle(mixed)
    together = {r.request.id: r for r in synth.run(mixed, max_batch=4)}
    for key, result in alone.items():
        assert torch.equal(result.codes, together[key].codes), key
        assert result.pcm.tobytes() == together[key].pcm.tobytes(), key
    assert max(r.batch_size_seen for r in together.values()) > 1


def _engine_draws(plain_talker, hook, compile):
    layout = EngineLayout.fix(plain_talker.model, INVARIANT, 2, compile)
    engine = Engine(plain_talker.model, max_batch=2, layout=layout, logits_hook=hook)
    prompts = [plain_talker.prompt(f"hooked request {i}") for i in range(2)]
    requests = [
        GenerationRequest(str(i), p, 6, AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS, rng=i) for i, p in enumerate(prompts)
    ]
    return list(engine.run(requests))


def test_a_recording_hook_sees_the_same_draws_compiled_as_eager(plain_talker):
    calls = {True: [], False: []}
    for compile in (False, True):
        results = _engine_draws(plain_talker, lambda *a, c=compile: calls[c].append(a[:3] + (a[4],)), compile)
        assert results
    assert calls[True] and sorted(calls[True]) == sorted(calls[False])


def test_a_model_with_packed_weights_is_refused_for_compiling():
    import moss_cli
    from moss_cli.assets import TINY_TALKER

    packed = moss_cli.load_talker(TINY_TALKER, device="cpu", dtype="float32")
    assert packed.model.packed
    with pytest.raises(ValueError, match="packed weights cannot be compiled"):
        Engine(packed.model, layout=EngineLayout.fix(packed.model, INVARIANT, 8, compile=True))


def test_a_hook_that_replaces_logits_is_refused_when_compiled(plain_talker):
    with pytest.raises(ValueError, match="compiled"):
        _engine_draws(plain_talker, lambda key, frame, cb, logits, *rest: logits + 1, True)


def test_audit_with_compile_passes_bitwise_and_reports_compile_time(tmp_path):
    out = tmp_path / "audit.json"
    args = ["audit-determinism", "--compile", "--level", "bitwise", "--scenarios", "shuffled,staggered"]
    result = runner.invoke(app, [*args, "--json", out])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["environment"]["compile"] is True
    assert report["summary"]["compile_s"] is not None and report["summary"]["passed"]


def test_bench_with_compile_reports_compile_time(tmp_path):
    out = tmp_path / "bench.json"
    args = ["bench", "--random-weights", "tiny", "--batch", "1", "--frames", "4", "--repeats", "1", "--compile"]
    result = runner.invoke(app, [*args, "--modes", "invariant", "--json", str(out)])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())["results"]
    assert row["compile_s"] is not None and row["compile_s"] >= 0
    assert json.loads(out.read_text())["setup"]["compile"] is True


def test_a_compiled_server_answers_concurrent_requests_with_the_audio_each_gets_alone(synth):
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from serve_helpers import pcm_hash, running

    from moss_cli.io.audio import pcm_sha256
    from moss_cli.speech_api import HEADER_MAX_IN_FLIGHT, SPEECH_PATH

    texts = [f"served and compiled, number {i}" for i in range(5)]
    alone = {}
    for i, text in enumerate(texts):
        (result,) = synth.run(synth.prepare([Request(id=f"s{i}", text=text, line=1, seed=i)]), max_batch=1)
        alone[i] = pcm_sha256(result.pcm)
    with running(SynthOptions(device="cpu", compile=True)) as (url, _):

        def post(i):
            return httpx.post(url + SPEECH_PATH, json={"input": texts[i], "seed": i}, timeout=120)

        with ThreadPoolExecutor(len(texts)) as pool:
            answers = list(pool.map(post, range(len(texts))))
    assert all(a.status_code == 200 for a in answers)
    assert [pcm_hash(a.content, "wav") for a in answers] == [alone[i] for i in range(len(texts))]
    assert max(int(a.headers[HEADER_MAX_IN_FLIGHT]) for a in answers) > 1
