"""Decode attention over the KV pool: one batched computation for every row, in fixed key blocks,
where a row's output is bitwise what it gets alone whatever its neighbours' lengths."""

import pytest
import torch

from moss_cli.engine.kv_cache import SCRATCH, BlockedDecode, KVPool
from moss_cli.model.attention import attend
from moss_cli.numerics.tiles import KEY_BLOCK

HEADS, KV_HEADS, DIM = 4, 2, 16
LENGTHS = [1, 3, KEY_BLOCK - 1, KEY_BLOCK, KEY_BLOCK + 1, 2 * KEY_BLOCK + 7]  # around block boundaries


def _pool(lengths, dtype=torch.float32, seed=0):
    """A pool whose slots hold random keys/values up to each length and large garbage after it
    (what an earlier, longer occupant would leave behind)."""
    gen = torch.Generator().manual_seed(seed)
    pool = KVPool(1, KV_HEADS, DIM, torch.device("cpu"), dtype)
    slots = [pool.allocate(max(lengths) + 1) for _ in lengths]
    pool.keys.normal_(generator=gen).mul_(1e6)  # garbage everywhere first
    pool.values.normal_(generator=gen).mul_(1e6)
    for slot, length in zip(slots, lengths):
        pool.keys[0, slot, :, :length] = torch.randn(KV_HEADS, length, DIM, generator=gen, dtype=dtype)
        pool.values[0, slot, :, :length] = torch.randn(KV_HEADS, length, DIM, generator=gen, dtype=dtype)
        pool.advance(slot, length)
    return pool, slots


def _step(pool, slots, q, k, v):
    """The attention of one decode step (which stores the new keys but leaves the lengths as they were)."""
    return BlockedDecode.of_slots(pool, slots).attend(0, q, k, v, DIM**-0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_a_rows_output_is_bitwise_the_same_alone_and_next_to_rows_of_any_length(dtype):
    """At the engine's fixed row count (idle rows on the scratch slot), a row gets the same bits
    alone, next to the shortest rows and next to the longest, for lengths crossing key blocks."""
    rows = 8
    pool, slots = _pool(LENGTHS + [3 * KEY_BLOCK + 5] * (rows - 1), dtype)
    slots, longer = slots[: len(LENGTHS)], slots[len(LENGTHS) :]
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(rows, 1, HEADS, DIM, generator=gen).to(dtype)
    k = torch.randn(rows, 1, KV_HEADS, DIM, generator=gen).to(dtype)
    v = torch.randn(rows, 1, KV_HEADS, DIM, generator=gen).to(dtype)
    together = _step(pool, slots + [SCRATCH] * (rows - len(slots)), q, k, v)
    for i, slot in enumerate(slots):
        alone = _step(pool, [slot] + [SCRATCH] * (rows - 1), q, k, v)
        with_longest = _step(pool, [slot] + longer, q, k, v)
        assert torch.equal(alone[0], together[i]) and torch.equal(with_longest[0], together[i]), LENGTHS[i]
        q, k, v = (torch.roll(t, -1, 0) for t in (q, k, v))  # row i's inputs move to row 0 for the next round


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fixed_step_gives_every_row_the_bits_of_the_host_laid_step_at_any_width(dtype):
    """The whole step's layout (`fixed`: slots as a tensor, positions read on the device, every row
    reading `width` keys by a gather) gives each row the bits the eager layout gives it, at every
    width that holds the longest row, and advances the lengths on the device alone."""
    rows = 8
    pool, slots = _pool(LENGTHS + [3 * KEY_BLOCK + 5] * (rows - len(LENGTHS)), dtype)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(rows, 1, HEADS, DIM, generator=gen).to(dtype)
    k = torch.randn(rows, 1, KV_HEADS, DIM, generator=gen).to(dtype)
    v = torch.randn(rows, 1, KV_HEADS, DIM, generator=gen).to(dtype)
    laid = slots[:5] + [SCRATCH] + slots[5:7]  # an idle row among them
    eager = _step(pool, laid, q, k, v)
    lengths = list(pool.lengths)
    ids = torch.tensor(laid)
    for width in (4 * KEY_BLOCK, pool.keys.shape[3]):
        step = BlockedDecode.fixed(pool, ids, width)
        out = step.attend(0, q, k, v, DIM**-0.5)
        real = [i for i, slot in enumerate(laid) if slot != SCRATCH]
        assert torch.equal(out[real], eager[real]), width
    step.advance()
    assert pool.lengths == lengths  # the host's copy follows when the step is read (`KVPool.stepped`)
    assert [pool.filled[s].item() for s in laid] == [lengths[s] + (s != SCRATCH) for s in laid]


def test_it_computes_attention_over_the_rows_own_keys():
    pool, slots = _pool(LENGTHS, torch.float64)
    gen = torch.Generator().manual_seed(2)
    n = len(slots)
    q = torch.randn(n, 1, HEADS, DIM, generator=gen, dtype=torch.float64)
    k = torch.randn(n, 1, KV_HEADS, DIM, generator=gen, dtype=torch.float64)
    v = torch.randn(n, 1, KV_HEADS, DIM, generator=gen, dtype=torch.float64)
    out = _step(pool, slots, q, k, v)
    for i, (slot, length) in enumerate(zip(slots, LENGTHS)):
        keys = torch.cat([pool.keys[0, slot, :, :length].transpose(0, 1), k[i]])[None]
        values = torch.cat([pool.values[0, slot, :, :length].transpose(0, 1), v[i]])[None]
        expected = attend(q[i : i + 1], keys, values, DIM**-0.5, None)
        torch.testing.assert_close(out[i : i + 1], expected, rtol=1e-10, atol=1e-10)


def test_freed_slots_are_reused_and_the_pool_grows_in_whole_key_blocks():
    pool = KVPool(2, KV_HEADS, DIM, torch.device("cpu"), torch.float32)
    first = pool.allocate(10)
    assert pool.keys.shape[3] == KEY_BLOCK
    second = pool.allocate(KEY_BLOCK + 1)
    assert pool.keys.shape[3] == 2 * KEY_BLOCK and first != second
    pool.release(first)
    assert pool.allocate(5) == first


def test_the_lengths_on_the_device_follow_those_on_the_host():
    """A decode step reads its positions from the device copy (no Python numbers copied per step)."""
    pool = KVPool(1, KV_HEADS, DIM, torch.device("cpu"), torch.float32)
    slots = [pool.allocate(4) for _ in range(3)]
    pool.advance(slots[1], 3)
    step = BlockedDecode.of_slots(pool, [slots[1], SCRATCH, slots[2]])
    assert step.positions.tolist() == [3, 0, 0]
    step.advance()
    pool.release(slots[2])
    again = pool.allocate(4)
    pool.advance(again, 2)
    assert pool.lengths == [0, 0, 4, 2] and again == slots[2]
    assert pool.allocate(KEY_BLOCK * 2) == 4  # the pool grows: the device copy with it
    filled = pool.filled.tolist()
    assert filled[: len(pool.lengths)] == pool.lengths and not any(filled[len(pool.lengths) :])
