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

import torch
import torch.nn.functional as F

from ..model.talker import MossTTSLocal
from ..numerics import Numerics

ONE_BLOCK = "one padded block"
_VERDICTS: dict[tuple, bool] = {}  # per shapes, dtype, device and thread count, in this process


def _weights(model: MossTTSLocal) -> dict[tuple[int, int, bool], torch.Tensor]:
    """One weight per distinct (out, in, has bias) among the products of a decode step."""
    found: dict[tuple[int, int, bool], torch.Tensor] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            found.setdefault((*module.weight.shape, module.bias is not None), module.weight)
    for table in model.audio_embeddings:  # the audio heads are tied to these tables
        found.setdefault((*table.weight.shape, False), table.weight)
    return found


def _same_rows(product, inputs: tuple[torch.Tensor, ...], sizes: list[int], offset: int) -> bool:
    """Whether `product(*inputs)` gives rows start..start+n the same bits when given only those rows."""
    full = product(*inputs)
    for rows in sizes:
        for start in (0, offset) if rows + offset <= full.shape[0] else (0,):
            part = product(*(x[start : start + rows] for x in inputs))
            if not torch.equal(part, full[start : start + rows]):
                return False
    return True


@torch.inference_mode()
def wide_blocks_are_invariant(model: MossTTSLocal, unit: int, block: int, max_rows: int) -> bool:
    """True when every product of a decode step gives each row the same bits for any multiple of
    `unit` rows up to `max_rows` (rounded up) and at `block` rows, here and now. Including the fixed
    block's size keeps the bits the same whichever layout a run picks (a different --max-batch may
    pick the other)."""
    top = max(unit * -(-max_rows // unit), block)
    param = next(model.parameters())
    weights = _weights(model)
    cfg = model.cfg.backbone
    key = (tuple(sorted(weights)), cfg.num_kv_heads, cfg.head_dim, param.dtype, param.device)
    key = (*key, torch.get_num_threads(), unit, block, top)
    if key in _VERDICTS:
        return _VERDICTS[key]
    generator = torch.Generator(device=param.device).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator, device=param.device, dtype=param.dtype)

    rows, sizes = top + unit, sorted({*range(unit, top + 1, unit), block})
    verdict = True
    for (out, inp, bias), weight in weights.items():
        shift = randn(out) if bias else None
        verdict = verdict and _same_rows(lambda x: F.linear(x, weight, shift), (randn(rows, inp),), sizes, unit)
    if verdict:  # decode attention: each row's batched products over its kv heads, query group and keys
        exact = torch.float64 if param.dtype == torch.float64 else torch.float32
        query = randn(rows, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim).to(exact)
        keys = randn(rows, cfg.num_kv_heads, cfg.head_dim, 2 * 64).to(exact)
        verdict = _same_rows(torch.matmul, (query, keys), sizes, unit)
    _VERDICTS[key] = verdict
    return verdict


def step_layout(model: MossTTSLocal, numerics: Numerics, max_batch: int, compile: bool = False) -> str:
    """How the engine shapes a decode step: "unpadded" (fast mode), "one padded block" (verified
    here) or "blocks of N" (a compiled frame keeps one shape, or the probe found a difference)."""
    block = numerics.engine_rows
    if not block:
        return "unpadded"
    unit = numerics.wide_unit
    if numerics.wide_blocks and not compile and wide_blocks_are_invariant(model, unit, block, max_batch):
        return ONE_BLOCK
    return f"blocks of {block}"
