"""Weights packed for oneDNN: the same products as the plain kernel up to rounding, for any row
count (none included), and a talker that packs its weights decodes what a plain one decodes."""

import pytest
import torch
import torch.nn.functional as F

import moss_cli
from moss_cli.assets import TINY_TALKER
from moss_cli.engine.requests import GenerationRequest
from moss_cli.engine.scheduler import Engine
from moss_cli.numerics import kernels
from moss_cli.sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_a_packed_weight_gives_the_plain_product_up_to_rounding(dtype, tolerance):
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 48, generator=gen).to(dtype)
    bias = torch.randn(96, generator=gen).to(dtype)
    if not kernels.can_pack(weight):
        pytest.skip(f"oneDNN cannot pack {dtype} on this CPU ({torch.backends.cpu.get_cpu_capability()})")
    packed = kernels.pack(weight)
    assert packed.is_mkldnn and packed.shape == weight.shape and packed.dtype == dtype
    for rows in (0, 1, 3, 8, 37):
        x = torch.randn(2, rows, 48, generator=gen).to(dtype)
        got = kernels.linear(x, packed, bias)
        assert got.shape == (2, rows, 96)
        torch.testing.assert_close(got.float(), F.linear(x, weight, bias).float(), rtol=tolerance, atol=tolerance)


def test_a_cpu_whose_onednn_refuses_bfloat16_loads_a_plain_bfloat16_talker(monkeypatch):
    # AVX2-only CPUs: oneDNN's bfloat16 reorder raises; can_pack must say no before anything packs.
    def refuse(weight, rows):
        if weight.dtype == torch.bfloat16:
            raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx512bw")
        return real(weight, rows)

    real = torch.ops.mkldnn._reorder_linear_weight
    kernels._packs.cache_clear()
    monkeypatch.setattr(kernels, "pack", lambda w: refuse(w.detach().contiguous(), kernels.PACKED_ROWS_HINT))
    try:
        assert not kernels.can_pack(torch.zeros(4, 4, dtype=torch.bfloat16))
        assert kernels.can_pack(torch.zeros(4, 4, dtype=torch.float32))
        talker = moss_cli.load_talker(TINY_TALKER, device="cpu", dtype="bfloat16")
        assert not talker.model.packed
        codes = talker.generate(*talker.batch([talker.prompt("plain bf16")]), max_new_frames=3, do_sample=False)
        assert codes[0].shape == (3, talker.model.cfg.n_vq)
    finally:
        kernels._packs.cache_clear()


def test_float64_and_accelerator_weights_stay_plain():
    assert not kernels.can_pack(torch.zeros(4, 4, dtype=torch.float64))
    assert not kernels.can_pack(torch.zeros(4, 4, device="meta"))
    talker = moss_cli.load_talker(TINY_TALKER, device="cpu", dtype="float64")
    assert not talker.model.packed


def test_a_packed_talker_decodes_the_greedy_codes_and_close_logits_of_a_plain_one(talker32):
    plain = moss_cli.load_talker(TINY_TALKER, device="cpu", dtype="float32", pack=False)
    assert talker32.model.packed and not plain.model.packed

    def run(talker):
        logits = {}

        def hook(key, frame, codebook, row_logits, batch, generator):
            logits[(key, frame, codebook)] = row_logits.clone()

        requests = [
            GenerationRequest(str(i), talker.prompt(f"packed or plain {i}"), 6, AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS,
                              do_sample=False)
            for i in range(3)
        ]  # fmt: skip
        codes = {r.key: r.codes for r in Engine(talker.model, max_batch=3, logits_hook=hook).run(requests)}
        return codes, logits

    (packed_codes, packed_logits), (plain_codes, plain_logits) = run(talker32), run(plain)
    assert all(torch.equal(packed_codes[k], plain_codes[k]) for k in plain_codes)
    for key, value in plain_logits.items():
        torch.testing.assert_close(packed_logits[key], value, rtol=1e-4, atol=1e-4)
