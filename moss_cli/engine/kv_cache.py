"""The engine's KV pool and the caches it hands to the backbone's attention (prefill, decode)."""

from __future__ import annotations

import heapq

import torch

from ..model.attention import attend, causal_mask
from ..numerics.attention import KeyBlocks, decode_attention
from ..numerics.tiles import KEY_BLOCK

SCRATCH = 0  # the pool slot idle rows write to
# Slots the pool keeps past the last one allocated: a lone request's step of two rows (its own and an
# idle one) then reads both as one view of the pool (BlockedDecode), instead of gathering copies.
SPARE_SLOTS = 1
_IDLE: dict[tuple, KVPool] = {}  # `KVPool.lent`: a pool whose engine ended, by `_kind`


def _kind(num_layers: int, num_kv_heads: int, head_dim: int, device, dtype: torch.dtype) -> tuple:
    return (num_layers, num_kv_heads, head_dim, torch.device(device), dtype)


class KVPool:
    """Every running request's keys and values in one tensor per layer, one slot per request,
    so a decode step attends for all rows with a few batched ops instead of a loop per request.

    Slot 0 is scratch: idle rows of a fixed-size block write there and their outputs are ignored.
    The pool grows (slots and positions, in whole key blocks) as requests arrive; positions past a
    request's length may hold an earlier occupant's values, which the masks never let through.

    Each slot's length is kept twice: on the host (`lengths`, for shapes) and on the device
    (`filled`, for the step's positions), so a decode step copies no Python numbers to the device.

    `few_shapes` (the step graphs', `compiled.StepGraphs`, which are captured over the pool's
    buffers): slots and positions grow in powers of two, so the buffers are made anew, and the
    graphs captured again, only a few times.
    """

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        device: torch.device,
        dtype: torch.dtype,
        few_shapes: bool = False,
    ):
        self.shape = (num_layers, num_kv_heads, head_dim)
        self.device, self.dtype, self.few_shapes = device, dtype, few_shapes
        # [layers, slots, kv heads, positions, head dim]: a row's keys for one head are contiguous, so
        # the attention's products read them without reordering.
        self.keys = torch.zeros(num_layers, 1, num_kv_heads, 0, head_dim, device=device, dtype=dtype)
        self.values = torch.zeros_like(self.keys)
        self.lengths: list[int] = [0]  # positions stored per slot
        self.filled = torch.zeros(1, dtype=torch.long, device=device)  # the same, on the device
        self.free: list[int] = []
        self._ints: dict[tuple[int, ...], torch.Tensor] = {}  # see `ints`

    @classmethod
    def lent(cls, num_layers: int, num_kv_heads: int, head_dim: int, device: torch.device, dtype: torch.dtype):
        """A `few_shapes` pool: the one an ended engine gave back (`give_back`), else a new one. A run
        makes an engine of its own, and the graphs captured over the last one's buffers replay
        again over the same buffers."""
        pool = _IDLE.pop(_kind(num_layers, num_kv_heads, head_dim, device, dtype), None)
        return pool if pool is not None else cls(num_layers, num_kv_heads, head_dim, device, dtype, few_shapes=True)

    @torch.inference_mode()
    def give_back(self) -> None:
        """Every slot freed, the pool kept for the next engine of its kind (`lent`): one at most."""
        self.lengths = [0] * len(self.lengths)
        self.filled.zero_()
        self.free = list(range(1, len(self.lengths)))  # a sorted list is a heap
        _IDLE[_kind(*self.shape, self.device, self.dtype)] = self

    def reserve(self, slots: int) -> None:
        """Room for `slots` requests at once (and the scratch slot) before any arrives."""
        self._grow(slots + 1 + SPARE_SLOTS, 0)

    def allocate(self, capacity: int) -> int:
        """A slot for a request that will store up to `capacity` positions."""
        slot = heapq.heappop(self.free) if self.free else len(self.lengths)  # lowest first: rows stay together
        if slot == len(self.lengths):
            self.lengths.append(0)
        self._grow(len(self.lengths) + SPARE_SLOTS, -(-capacity // KEY_BLOCK) * KEY_BLOCK)
        self._empty(slot)
        return slot

    def release(self, slot: int) -> None:
        self._empty(slot)
        heapq.heappush(self.free, slot)

    @torch.inference_mode()  # the engine's tensors are inference tensors; a request may be cancelled outside
    def _empty(self, slot: int) -> None:
        self.lengths[slot] = 0
        self.filled[slot : slot + 1].zero_()

    @torch.inference_mode()
    def advance(self, slot: int, steps: int) -> None:
        self.lengths[slot] += steps
        self.filled[slot : slot + 1].add_(steps)

    def stepped(self, slots: tuple[int, ...]) -> None:
        """The host's lengths of `slots` after a decode step stored one position in each."""
        for slot in slots:
            self.lengths[slot] += 1

    def ints(self, values: tuple[int, ...]) -> torch.Tensor:
        """`values` (slots, block places) as a tensor on the pool's device, made once: a step's
        indices change only when its rows do, and are then copied to the device once."""
        if values not in self._ints:
            if len(self._ints) >= 256:  # the compositions of requests long gone
                self._ints.clear()
            self._ints[values] = torch.tensor(values, dtype=torch.long, device=self.device)
        return self._ints[values]

    def _grow(self, slots: int, capacity: int) -> None:
        have_slots, have_capacity = self.keys.shape[1], self.keys.shape[3]
        if slots <= have_slots and capacity <= have_capacity:
            return
        if self.few_shapes:
            slots = 1 << (slots - 1).bit_length()
            blocks = -(-capacity // KEY_BLOCK)
            capacity = (1 << (blocks - 1).bit_length()) * KEY_BLOCK if blocks else 0
        layers, heads, dim = self.shape
        slots = max(slots, 2 * have_slots) if slots > have_slots else have_slots  # grow rarely
        size = (layers, slots, heads, max(capacity, have_capacity), dim)
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = torch.zeros(size, device=self.device, dtype=self.dtype)
            new[:, :have_slots, :, :have_capacity] = old
            setattr(self, name, new)
        self.filled = torch.cat([self.filled, self.filled.new_zeros(slots - self.filled.shape[0])])


class SlotPrefill:
    """A request's prompt, alone: stores its keys/values in its slot and attends causally over
    them, exactly as a single-request cache does."""

    def __init__(self, pool: KVPool, slot: int) -> None:
        self.pool, self.slot = pool, slot

    def attend(self, layer: int, q, k, v, scale: float) -> torch.Tensor:
        start = self.pool.lengths[self.slot]
        end = start + k.shape[1]
        self.pool.keys[layer, self.slot, :, start:end] = k[0].transpose(0, 1)
        self.pool.values[layer, self.slot, :, start:end] = v[0].transpose(0, 1)
        keys = self.pool.keys[layer, self.slot, :, :end].transpose(0, 1)[None]  # [1, T, Hkv, D]
        values = self.pool.values[layer, self.slot, :, :end].transpose(0, 1)[None]
        mask = causal_mask(q.shape[1], end, q.device) if q.shape[1] > 1 else None
        return attend(q, keys, values, scale, mask)

    def advance(self, steps: int) -> None:
        self.pool.advance(self.slot, steps)


class GroupedPrefill:
    """Several requests' prompts in one forward: the matrix products see all their rows at once,
    while each request attends over its own keys alone, exactly as SlotPrefill does for it.
    `spans[i]` are request i's rows [start, stop) in the forward; rows between spans are padding
    (their outputs are ignored and they store nothing)."""

    def __init__(self, pool: KVPool, slots: list[int], spans: list[tuple[int, int]]) -> None:
        self.pool, self.slots, self.spans = pool, slots, spans

    def attend(self, layer: int, q, k, v, scale: float) -> torch.Tensor:
        if len(self.spans) == 1 and self.spans[0] == (0, q.shape[1]):
            return SlotPrefill(self.pool, self.slots[0]).attend(layer, q, k, v, scale)
        out = q.new_zeros(q.shape)
        for slot, (start, stop) in zip(self.slots, self.spans):
            rows = slice(start, stop)
            out[:, rows] = SlotPrefill(self.pool, slot).attend(layer, q[:, rows], k[:, rows], v[:, rows], scale)
        return out

    def advance(self) -> None:
        for slot, (start, stop) in zip(self.slots, self.spans):
            self.pool.advance(slot, stop - start)


class BlockedDecode:
    """One decode step (one new position per row) for rows living in pool slots: stores each row's
    new key and value in its slot, then attends over each row's own keys in fixed key blocks
    (`numerics.attention.decode_attention`), so a row's numbers are the same whatever the lengths
    of the rows it shares the step with. Idle rows (on the scratch slot) compute anything at all:
    their outputs are ignored.

    Two ways to lay a step out, with the same bits for every real row:
    - `of_slots`: the eager step's. The host knows the slots and lengths, reads as few key blocks as
      the longest row needs, and reads the slots as a view where they are consecutive;
    - `fixed`: the whole step's (`step.whole_step`), given only the slots as a tensor and a width:
      positions come from the pool's lengths on the device, every row gathers `width` keys, and
      the lengths advance on the device. It asks the host nothing, so it can be captured as a graph.
    """

    def __init__(self, pool: KVPool, slot_ids: torch.Tensor, blocks: KeyBlocks, rows: slice | torch.Tensor) -> None:
        self.pool, self.slot_ids, self.blocks, self.rows = pool, slot_ids, blocks, rows
        self.positions = blocks.positions  # where each row's new key goes
        _, heads, _ = pool.shape
        capacity = pool.keys.shape[3]
        # Where each (row, KV head)'s new key goes in a layer's pool seen as rows of `dim`.
        per_head = torch.arange(heads, device=pool.device)
        self.stored = ((slot_ids[:, None] * heads + per_head) * capacity + self.positions[:, None]).flatten()
        self.real: tuple[int, ...] | None = None  # of_slots: the real rows' slots, advanced on the host too

    @classmethod
    def of_slots(cls, pool: KVPool, slots: list[int]) -> BlockedDecode:
        slot_ids = pool.ints(tuple(slots))
        positions = pool.filled.index_select(0, slot_ids)
        lengths = [pool.lengths[s] for s in slots]  # where each row's new key goes (host: for shapes)
        blocks = KeyBlocks.covering(positions, lengths, [s != SCRATCH for s in slots], pool.shape[1])
        step = cls(pool, slot_ids, blocks, cls._read_rows(slots, slot_ids, pool.keys.shape[1]))
        step.real = tuple(slot for slot in slots if slot != SCRATCH)
        return step

    @classmethod
    def fixed(cls, pool: KVPool, slot_ids: torch.Tensor, width: int) -> BlockedDecode:
        positions = pool.filled.index_select(0, slot_ids)
        return cls(pool, slot_ids, KeyBlocks(positions, width, pool.shape[1]), slot_ids)

    @staticmethod
    def _read_rows(slots: list[int], slot_ids: torch.Tensor, have: int) -> slice | torch.Tensor:
        """Which pool slots the step reads, row by row: a range (a view, nothing copied) where the
        real rows' slots are consecutive and any idle rows come after them (those then read the
        slots that follow, which the pool keeps room for), else the slots to gather."""
        first = slots[0]
        real = next((i for i, s in enumerate(slots) if s == SCRATCH), len(slots))
        consecutive = slots[:real] == list(range(first, first + real))
        if first != SCRATCH and consecutive and all(s == SCRATCH for s in slots[real:]) and first + len(slots) <= have:
            return slice(first, first + len(slots))
        return slot_ids

    def attend(self, layer: int, q, k, v, scale: float) -> torch.Tensor:
        dim = q.shape[-1]
        batch = q.shape[0] * k.shape[2]
        keys, values = self.pool.keys[layer], self.pool.values[layer]
        keys.view(-1, dim).index_copy_(0, self.stored, k.reshape(batch, dim))
        values.view(-1, dim).index_copy_(0, self.stored, v.reshape(batch, dim))
        width = self.blocks.width
        row_keys, row_values = (self._rows(pool.narrow(2, 0, width)) for pool in (keys, values))
        return decode_attention(q, row_keys, row_values, scale, self.blocks)

    def _rows(self, pool: torch.Tensor) -> torch.Tensor:
        """The rows' part of one layer's pool: [n, Hkv, width, D]."""
        return pool[self.rows] if isinstance(self.rows, slice) else pool.index_select(0, self.rows)

    def advance(self) -> None:
        """Every real row's length by one (the scratch slot's stays 0), on the device; `of_slots` on
        the host too (`fixed`: the host's copy follows once the step is read, `KVPool.stepped`)."""
        filled = self.pool.filled
        filled.index_add_(0, self.slot_ids, self.slot_ids.ne(SCRATCH).to(filled.dtype))
        if self.real is not None:
            self.pool.stepped(self.real)
