"""Prompts admitted together share prefill forwards: each prompt's keys, values and last hidden
state are bitwise what it gets alone, and where the platform's products are not verified
row-invariant every prompt keeps a forward of its own."""

from types import SimpleNamespace

import pytest
import torch

from moss_cli.engine.kv_cache import KVPool
from moss_cli.engine.prefill import prefill
from moss_cli.numerics import FAST, INVARIANT, Numerics, kernels, probes
from moss_cli.numerics.layout import EngineLayout, PrefillLayout, prefill_groups, prefill_layout

TEXTS = ["one", "a somewhat longer prompt for the group", "mid length text here", "x " * 40]


def _pool(model):
    cfg = model.cfg.backbone
    param = next(model.parameters())
    return KVPool(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, param.device, param.dtype)


def _prefill(talker, prompts, layout):
    pool = _pool(talker.model)
    slots = [pool.allocate(int(p.shape[0]) + 4) for p in prompts]
    with torch.inference_mode():
        hidden = prefill(talker.model, pool, prompts, slots, layout)
    keys = [pool.keys[:, s, :, : pool.lengths[s]].clone() for s in slots]
    values = [pool.values[:, s, :, : pool.lengths[s]].clone() for s in slots]
    return hidden, keys, values


def test_prompts_sharing_a_forward_get_the_bits_they_get_alone(talker32):
    layout = prefill_layout(talker32.model, INVARIANT)
    assert layout == PrefillLayout(256, 4, 32)  # verified on this CPU
    prompts = [talker32.prompt(t)[-n:] for t, n in zip(TEXTS, (13, 30, 47, 61))]  # short, as real prompts are
    assert len({int(p.shape[0]) % 4 for p in prompts}) > 1  # lengths that need padding, and differently
    assert prefill_groups([int(p.shape[0]) for p in prompts], layout) == [([0, 1, 2, 3], True)]  # one forward
    together = _prefill(talker32, prompts, layout)
    for i, prompt in enumerate(prompts):
        alone = _prefill(talker32, [prompt], layout)
        for part, mine in zip(together, alone):
            assert torch.equal(part[i], mine[0]), i
        assert alone[1][0].shape[-2] == prompt.shape[0]  # padding rows store nothing


def test_a_grouped_prefill_computes_what_a_forward_of_its_own_computes(talker32):
    """Padding and sharing change at most the last bits (the products see other row counts)."""
    prompts = [talker32.prompt(t) for t in TEXTS]
    grouped = _prefill(talker32, prompts, PrefillLayout(1024, 4, 32))
    own = _prefill(talker32, prompts, None)
    for part, reference in zip(grouped, own):
        for a, b in zip(part, reference):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_groups_hold_at_most_their_rows_and_a_longer_prompt_has_a_forward_of_its_own():
    layout = PrefillLayout(rows=16, unit=4, step=8)
    assert prefill_groups([3, 5, 9, 17, 2, 15, 1], layout) == [
        ([0, 1], True),  # rows 0-2 and 4-8, padded to 16; the next would start at 12 and end past 16
        ([3], False),  # longer than a forward: alone and unpadded, wherever it lands
        ([2, 4], True),  # the open forward still takes a short prompt: rows 0-8 and 12-13
        ([5], True),
        ([6], True),  # 15 rows, then one from row 16 would pass 16
    ]
    assert prefill_groups([3, 5], None) == [([0], False), ([1], False)]
    assert prefill_groups([3, 5], PrefillLayout(16, 1)) == [([0, 1], True)]  # fast mode: no padding


def test_every_prompt_has_a_forward_of_its_own_where_a_product_depends_on_the_row_count(talker32, monkeypatch):
    def rounding_by_row_count(x, weight, bias=None):  # a library that rounds differently per M
        return kernels.linear(x, weight, bias) + x.shape[0] * 1e-6

    monkeypatch.setattr(probes, "_VERDICTS", {})
    monkeypatch.setattr(probes, "kernels", SimpleNamespace(linear=rounding_by_row_count, pack=kernels.pack))
    assert prefill_layout(talker32.model, INVARIANT) is None
    assert prefill_layout(talker32.model, FAST) == PrefillLayout(256, 1)  # fast mode shares forwards anyway
    assert prefill_layout(talker32.model, Numerics(probe=False)) is None


@pytest.mark.parametrize("rows", [64, 1024])
def test_the_engine_output_does_not_depend_on_how_prompts_were_grouped(talker32, rows):
    from moss_cli.engine.requests import GenerationRequest
    from moss_cli.engine.scheduler import Engine
    from moss_cli.sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS

    def run(numerics, max_batch):
        requests = [
            GenerationRequest(str(i), talker32.prompt(t), 6, AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS, rng=i)
            for i, t in enumerate(TEXTS)
        ]
        layout = EngineLayout.fix(talker32.model, numerics, max_batch)
        engine = Engine(talker32.model, max_batch=max_batch, layout=layout)
        return {r.key: r.codes for r in engine.run(requests)}

    numerics = Numerics(prefill_rows=rows)
    together, one_by_one = run(numerics, 4), run(numerics, 1)
    assert all(torch.equal(together[k], one_by_one[k]) for k in together)
