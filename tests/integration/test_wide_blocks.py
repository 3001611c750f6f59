"""One padded block for the whole batch where the platform's products are verified row-invariant:
the same bits as fixed 8-row blocks, and a fallback to fixed blocks where the probe finds a
product whose rows depend on the row count."""

from types import SimpleNamespace

import torch

from moss_cli.engine.kv_cache import SPARE_SLOTS
from moss_cli.engine.requests import GenerationRequest
from moss_cli.engine.scheduler import Engine
from moss_cli.numerics import Numerics, kernels, layout, probes
from moss_cli.sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS


def _layout(talker, numerics: Numerics, max_batch: int) -> layout.EngineLayout:
    return layout.EngineLayout.fix(talker.model, numerics, max_batch)


def _one_block(engine) -> bool:
    return engine.step.decode.kind is layout.Steps.ONE_BLOCK


def _run(talker, numerics: Numerics, count: int, max_batch: int = 16):
    logits = {}

    def hook(key, frame, codebook, row_logits, batch, generator):
        logits[(key, frame, codebook)] = row_logits.clone()

    engine = Engine(talker.model, max_batch=max_batch, layout=_layout(talker, numerics, max_batch), logits_hook=hook)
    requests = [
        GenerationRequest(
            str(i),
            talker.prompt(f"wide block request {i} " * (1 + i % 3)),
            8 + i,
            AUDIO_DEFAULTS,
            STOP_HEAD_DEFAULTS,
            rng=i,
        )
        for i in range(count)
    ]
    return engine, {r.key: r.codes for r in engine.run(requests)}, logits


def test_one_padded_block_gives_the_bits_of_fixed_blocks(talker32):
    wide, wide_codes, wide_logits = _run(talker32, Numerics(), 13)
    fixed, fixed_codes, fixed_logits = _run(talker32, Numerics(probe=False), 13)
    # this CPU gives a row the same bits at every multiple of 2 or 4 rows
    assert _one_block(wide) and not _one_block(fixed)
    assert wide_codes.keys() == fixed_codes.keys()
    assert all(torch.equal(wide_codes[k], fixed_codes[k]) for k in wide_codes)
    assert wide_logits.keys() == fixed_logits.keys()
    assert all(torch.equal(wide_logits[k], fixed_logits[k]) for k in wide_logits)


def test_the_engine_keeps_fixed_blocks_where_a_product_depends_on_the_row_count(talker32, monkeypatch):
    def rounding_by_row_count(x, weight, bias=None):  # a library that rounds differently per M
        return kernels.linear(x, weight, bias) + x.shape[0] * 1e-6

    monkeypatch.setattr(probes, "_VERDICTS", {})
    monkeypatch.setattr(probes, "kernels", SimpleNamespace(linear=rounding_by_row_count, pack=kernels.pack))
    assert not probes.one_block_is_invariant(talker32.model, 4, 8, 16)
    monkeypatch.undo()
    assert probes.one_block_is_invariant(talker32.model, 4, 8, 16)


def test_a_small_batch_is_probed_against_the_fixed_block_too(talker32, monkeypatch):
    """With --max-batch 4 the padded block never exceeds 4 rows, but another run may use fixed
    8-row blocks: 4 and 8 rows must agree, or both runs use fixed blocks."""

    def differs_at_eight(x, weight, bias=None):
        return kernels.linear(x, weight, bias) + (x.shape[0] % 8 == 0) * 1e-6

    monkeypatch.setattr(probes, "_VERDICTS", {})
    monkeypatch.setattr(probes, "kernels", SimpleNamespace(linear=differs_at_eight, pack=kernels.pack))
    assert not probes.one_block_is_invariant(talker32.model, 4, 8, 4)


def test_a_lone_request_pays_for_one_padding_unit_not_a_whole_fixed_block(talker32):
    engine = Engine(talker32.model, max_batch=8, layout=_layout(talker32, Numerics(), 8))
    seen = []
    plan = engine.step.plan

    def planned(running):
        step = plan(running)
        seen.extend(block.size for block in step.blocks)
        return step

    engine.step.plan = planned
    request = GenerationRequest("0", talker32.prompt("alone"), 3, AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS, rng=1)
    list(engine.run([request]))
    assert _one_block(engine) and engine.step.decode.unit < 8 and set(seen) == {engine.step.decode.unit}


def test_an_unused_max_batch_is_neither_probed_nor_allocated(talker32, monkeypatch):
    """One request with --max-batch 100000: the probe covers at most ONE_BLOCK_PROBE_ROWS rows and the
    KV pool one request (probing every row count up to the maximum took minutes)."""
    probed = []
    probe = probes.one_block_is_invariant

    def bounded_probe(model, unit, block, max_rows):
        assert max_rows <= layout.ONE_BLOCK_PROBE_ROWS, f"probed up to {max_rows} rows for one request"
        probed.append(max_rows)
        return probe(model, unit, block, max_rows)

    monkeypatch.setattr(probes, "one_block_is_invariant", bounded_probe)
    assert (
        str(layout.EngineLayout.fix(talker32.model, Numerics(), 100_000).steps) != "blocks of 8"
    )  # the environment's record
    engine = Engine(talker32.model, max_batch=100_000, layout=_layout(talker32, Numerics(), 100_000))
    request = GenerationRequest("0", talker32.prompt("alone"), 3, AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS, rng=1)
    list(engine.run([request]))
    assert _one_block(engine) and max(probed) <= layout.ONE_BLOCK_PROBE_ROWS
    assert engine.pool.keys.shape[1] == 2 + SPARE_SLOTS  # the scratch slot, the request's and the spare ones


def test_a_growing_batch_extends_the_probe_to_its_size(talker32, monkeypatch):
    monkeypatch.setattr(layout, "ONE_BLOCK_PROBE_ROWS", 8)  # probed up to 8 rows as the engine is built
    probed = []
    probe = probes.one_block_is_invariant

    def recorded_probe(model, unit, block, max_rows):
        probed.append(max_rows)
        return probe(model, unit, block, max_rows)

    monkeypatch.setattr(probes, "one_block_is_invariant", recorded_probe)
    engine, _, _ = _run(talker32, Numerics(), 13, max_batch=64)
    assert _one_block(engine) and engine.step.decode.probed == 16 and max(probed) == 16
