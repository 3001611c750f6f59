"""The physical bound on a decode step (bench/floor.py): the bytes it must read, counted by hand on the
tiny preset's shapes, and the copy bandwidth they are divided by."""

import dataclasses
import math

import pytest
import torch

from moss_cli.bench.floor import copy_bandwidth, kv_bytes, step_bytes, weight_bytes
from moss_cli.bench.models import _built, preset_configs
from moss_cli.model.talker import MossTTSLocal


def _tiny(dtype: torch.dtype, **changes) -> MossTTSLocal:
    cfg = dataclasses.replace(preset_configs("tiny")[0], **changes)
    with torch.device("meta"):
        model = MossTTSLocal(cfg)
    return _built(model, torch.device("cpu"), dtype, 0).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_step_reads_its_weights_as_often_as_it_uses_them_and_its_cache_once(dtype):
    model = _tiny(dtype)
    cfg = model.cfg
    # the tiny preset: hidden 64, 2 backbone layers of 4 query / 2 KV heads of 16, FFN 128; one local
    # layer (FFN 128) and a head of 128 codes at each of the 6 codebook positions, a 2-way stop head
    assert (cfg.hidden_size, cfg.backbone.num_layers, cfg.backbone.head_dim, cfg.n_vq) == (64, 2, 16, 6)
    assert (cfg.local.num_layers, cfg.local.inner_size, cfg.audio_codebook_sizes[0]) == (1, 128, 128)
    attention = 64 * 64 + 2 * (32 * 64) + 64 * 64  # q, k, v, o
    mlp = 3 * 128 * 64  # gate, up, down
    local = 3 * 64 * 64 + 64 * 64 + 2 * 128 * 64  # c_attn, c_proj, fc_in, fc_out
    head = 128 * 64
    values = 2 * (attention + mlp) + 6 * (local + head) + 2 * 64
    assert values == 319_616
    size = 4 if dtype == torch.float32 else 2
    assert weight_bytes(model) == values * size
    # keys and values, 2 layers, 2 KV heads of 16, per row and position
    assert kv_bytes(model, 3, 250) == 2 * 2 * 3 * 2 * 250 * 16 * size
    assert step_bytes(model, 3, 250) == weight_bytes(model) + kv_bytes(model, 3, 250)


def test_a_full_vocabulary_stop_head_reads_the_whole_text_embedding():
    binary, full = _tiny(torch.float32), _tiny(torch.float32, local_text_head_mode="full_vocab")
    vocab = full.transformer.embed_tokens.weight.shape[0]
    assert weight_bytes(full) - weight_bytes(binary) == (vocab - 2) * 64 * 4


def test_packing_the_weights_for_onednn_leaves_the_bytes_a_step_reads_unchanged():
    plain, packed = _tiny(torch.float32), _tiny(torch.float32)
    if not packed.pack_weights():
        pytest.skip("needs oneDNN packing (a CPU with float32 oneDNN)")
    assert weight_bytes(packed) == weight_bytes(plain)


def test_the_copy_bandwidth_is_a_positive_finite_rate():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rate = copy_bandwidth(torch.device("cpu"), nbytes=16 * 2**20, repeats=3)
    finally:
        torch.set_num_threads(threads)
    # bytes read and written per second: any machine's memory moves between 100 MB/s and 100 TB/s
    assert math.isfinite(rate) and 1e8 < rate < 1e14


def test_a_full_vocabulary_stop_head_picks_its_two_columns_without_copying_ids_to_the_device():
    """Its logits are the text head's two columns (continue, stop), bit for bit, and no tensor is
    made from Python numbers (on a GPU, a copy at every frame that a graph cannot capture)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    model = _tiny(torch.float32, local_text_head_mode="full_vocab")
    cfg = model.cfg
    hidden = torch.randn(3, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    made = []

    class Copies(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if str(func) == "aten.lift_fresh.default":
                made.append(func)
            return func(*args, **(kwargs or {}))

    with Copies():
        logits = model.stop_logits(hidden)
    whole = torch.nn.functional.linear(hidden, model.transformer.embed_tokens.weight)
    assert torch.equal(logits, whole[:, [cfg.audio_assistant_slot_token_id, cfg.audio_end_token_id]]) and not made
