"""Can one padded block hold the whole batch? A probe of this platform's matrix products.

Batch-invariant decoding needs every row's numbers to be independent of how many rows share its
step. Fixed blocks of `block` rows guarantee it anywhere, but a batch of 32 then streams every
weight four times. Many GEMM libraries compute each row of a product the same way for any row
count that is a multiple of a small block (the reduction order over K is fixed by the kernel, not
by M); where that holds, a batch of 32 can be one product of 32 rows and stay bitwise invariant.
Whether it holds depends on the library, the device, the dtype and the shapes, so it is measured,
not assumed: the model's own weight shapes (with and without bias) and the decode attention's
batched products, at every padded row count up to the engine's maximum and at two row offsets.
One differing bit anywhere and the engine keeps its fixed blocks. The audit remains the proof.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..gemm_probe import Shape, linears_agree, rows_agree
from ..model.talker import MossTTSLocal
from ..numerics import Numerics

_VERDICTS: dict[tuple, bool] = {}  # attention products, per shapes, dtype, device and thread count


def _shapes(model: torch.nn.Module) -> set[Shape]:
    """The distinct (out, in, has bias, dtype) among the products of `model`'s linear layers and,
    for the talker, of its audio heads."""
    found: set[Shape] = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            found.add((*module.weight.shape, module.bias is not None, module.weight.dtype))
    for table in getattr(model, "audio_embeddings", ()):  # the audio heads are tied to these tables
        found.add((*table.weight.shape, False, table.weight.dtype))
    return found


@torch.inference_mode()
def wide_blocks_are_invariant(model: MossTTSLocal, unit: int, block: int, max_rows: int) -> bool:
    """True when every product of a decode step gives each row the same bits for any multiple of
    `unit` rows up to `max_rows` (rounded up) and at `block` rows, here and now. Including the fixed
    block's size keeps the bits the same whichever layout a run picks (a different --max-batch may
    pick the other)."""
    top = max(unit * -(-max_rows // unit), block)
    sizes = sorted({*range(unit, top + 1, unit), block})
    param = next(model.parameters())
    if not linears_agree(_shapes(model), unit, sizes, param.device, model.packed):
        return False
    # decode attention: each row's batched products over its kv heads, query group and keys
    cfg = model.cfg.backbone
    exact = torch.float64 if param.dtype == torch.float64 else torch.float32
    key = (cfg.num_kv_heads, cfg.num_heads, cfg.head_dim, exact, str(param.device), torch.get_num_threads(), unit)
    key = (*key, tuple(sizes))
    if key not in _VERDICTS:
        generator = torch.Generator(device=param.device).manual_seed(0)

        def randn(*shape):
            return torch.randn(*shape, generator=generator, device=param.device, dtype=exact)

        rows = top + unit
        query = randn(rows, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim)
        keys = randn(rows, cfg.num_kv_heads, cfg.head_dim, 2 * 64)
        _VERDICTS[key] = rows_agree(torch.matmul, (query, keys), sizes, unit)
    return _VERDICTS[key]


PREFILL_STEP = 32  # a shared prefill forward has a multiple of this many rows (few sizes to verify)


@dataclass(frozen=True)
class PrefillLayout:
    """Prompts admitted together share forwards of at most `rows` rows. Each prompt starts at a
    multiple of `unit` rows, and a forward is padded to a multiple of `step` rows. A prompt longer
    than `rows` is prefilled alone, unpadded."""

    rows: int
    unit: int
    step: int = 1

    def padded(self, rows: int) -> int:
        return -(-rows // self.step) * self.step


def prefill_layout(model: MossTTSLocal, numerics: Numerics) -> PrefillLayout | None:
    """How prompts are prefilled: grouped (fast mode; or batch-invariant where every multiple of
    `step` rows up to `rows` gives a prompt row the same bits, so a prompt's keys and hidden state
    do not depend on the prompts it shares a forward with) or None: one prompt per forward."""
    if not numerics.batch_invariant:
        return PrefillLayout(numerics.prefill_rows, 1)
    unit, rows = numerics.wide_unit, numerics.prefill_rows
    if not numerics.wide_blocks or rows < PREFILL_STEP or PREFILL_STEP % unit:
        return None
    shapes = _shapes(model.transformer)  # prefill runs the backbone only
    device = next(model.parameters()).device
    if not linears_agree(shapes, unit, range(PREFILL_STEP, rows + 1, PREFILL_STEP), device, model.packed):
        return None
    return PrefillLayout(rows - rows % PREFILL_STEP, unit, PREFILL_STEP)


def wide_unit(model: MossTTSLocal, numerics: Numerics, max_batch: int, compile: bool = False) -> int | None:
    """The row count a one-block decode step is padded to a multiple of: the smallest of 1, 2, 4 ...
    (up to `numerics.wide_unit`) at which this platform is verified to give a row the same bits, or
    None: fixed blocks (fast mode has no blocks at all; a compiled frame keeps one shape). Every
    verified unit agrees with the fixed block's size, so runs that pick different units (another
    --max-batch) still give a row the same bits."""
    block = numerics.engine_rows
    if not block or not numerics.wide_blocks or compile:
        return None
    unit = 1
    while unit <= numerics.wide_unit:
        if numerics.wide_unit % unit == 0 and wide_blocks_are_invariant(model, unit, block, max_batch):
            return unit
        unit *= 2
    return None


def step_layout(model: MossTTSLocal, numerics: Numerics, max_batch: int, compile: bool = False) -> str:
    """How the engine shapes a decode step as it starts, in words (recorded in the run's
    environment). The engine verifies up to a block's rows at first and a larger batch when it
    forms (falling back to fixed blocks, with the same bits, where that fails)."""
    block = numerics.engine_rows
    if not block:
        return "unpadded"
    unit = wide_unit(model, numerics, min(max_batch, block), compile)
    if unit is None:
        return f"blocks of {block}"
    return "one block" if unit == 1 else f"one block padded to a multiple of {unit}"
