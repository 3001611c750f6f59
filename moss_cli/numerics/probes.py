"""Does this platform's matrix product give a row the same bits at other row counts? Measured.

A GEMM may round a row differently for different row counts (another kernel, another split of
the reduction); fixed-size tiles avoid the question anywhere, at the price of padding. Many CPU
libraries, though, compute a row the same way for every row count that is a multiple of a small
unit (the reduction order over K is fixed by the kernel, not by M). Where a probe of the real
shapes shows that, padding can stop at that unit, and a batch of 32 can be one product of 32 rows
instead of four 8-row blocks that each stream every weight. The verdict depends on the library,
device, dtype, shapes and thread count, so it is measured for each, once per process; one
differing bit and the caller keeps its full padding. The audit remains the proof.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from . import kernels
from .tiles import KEY_BLOCK

# (out features, in features, has bias, dtype): one product shape
Shape = tuple[int, int, bool, torch.dtype]
_VERDICTS: dict[tuple, bool] = {}  # per product kind, shapes, sizes, device and thread count


def rows_agree(product: Callable, inputs: tuple[torch.Tensor, ...], sizes: Iterable[int], offset: int) -> bool:
    """Whether `product(*inputs)` gives rows start..start+n the same bits when given only those
    rows, for every n in `sizes`, at start 0 and at `offset` (where the rows fit). The inputs hold
    as many rows as the largest size: only row counts a caller uses are compared (a library may
    switch kernels at a row count nobody runs)."""
    full = product(*inputs)
    for rows in sizes:
        for start in (0, offset) if rows + offset <= full.shape[0] else (0,):
            part = product(*(x[start : start + rows] for x in inputs))
            if not torch.equal(part, full[start : start + rows]):
                return False
    return True


@torch.inference_mode()
def linears_agree(
    shapes: Iterable[Shape], unit: int, sizes: Iterable[int], device: torch.device, packed: bool = False
) -> bool:
    """True when the linear product (on weights packed for oneDNN with `packed`), for every shape,
    gives each row the same bits at every row count in `sizes` as in a product of max(sizes) rows,
    at row offsets 0 and `unit` (random inputs and weights: the kernel a library picks depends on
    shapes, strides and dtype, not on values)."""
    shapes, sizes = sorted(set(shapes), key=str), sorted(set(sizes))
    key = ("linear", tuple(shapes), unit, tuple(sizes), str(device), torch.get_num_threads(), packed)
    if key not in _VERDICTS:
        generator = torch.Generator(device=device).manual_seed(0)
        verdict = True
        for out, inp, bias, dtype in shapes:

            def randn(*size, dtype=dtype):
                return torch.randn(*size, generator=generator, device=device, dtype=dtype)

            weight, shift = randn(out, inp), randn(out) if bias else None
            weight = kernels.pack(weight) if packed else weight
            x = randn(sizes[-1], inp)
            if not rows_agree(lambda rows: kernels.linear(rows, weight, shift), (x,), sizes, unit):
                verdict = False
                break
        _VERDICTS[key] = verdict
    return _VERDICTS[key]


def linear_shapes(model: torch.nn.Module) -> set[Shape]:
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
def one_block_is_invariant(model: torch.nn.Module, unit: int, block: int, max_rows: int) -> bool:
    """True when every product of the talker `model`'s decode step (its linear layers, its heads
    and the decode attention's batched products over its kv heads, query group and keys) gives
    each row the same bits for any multiple of `unit` rows up to `max_rows` (rounded up) and at
    `block` rows, here and now, at two row offsets. Including the fixed block's size keeps the
    bits the same whichever layout a run picks (a different --max-batch may pick the other)."""
    top = max(unit * -(-max_rows // unit), block)
    sizes = sorted({*range(unit, top + 1, unit), block})
    param = next(model.parameters())
    if not linears_agree(linear_shapes(model), unit, sizes, param.device, model.packed):
        return False
    cfg = model.cfg.backbone
    exact = torch.float64 if param.dtype == torch.float64 else torch.float32
    key = ("attention", cfg.num_kv_heads, cfg.num_heads, cfg.head_dim, exact, str(param.device))
    key = (*key, torch.get_num_threads(), unit, tuple(sizes))
    if key not in _VERDICTS:
        generator = torch.Generator(device=param.device).manual_seed(0)

        def randn(*shape):
            return torch.randn(*shape, generator=generator, device=param.device, dtype=exact)

        query, keys = _attention_inputs(cfg, top, randn)
        _VERDICTS[key] = rows_agree(torch.matmul, (query, keys), sizes, unit)
    return _VERDICTS[key]


def _attention_inputs(cfg, rows: int, randn: Callable) -> tuple[torch.Tensor, torch.Tensor]:
    """A decode step's query rows and one block of keys, as the batched attention product takes them."""
    query = randn(rows, cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads, cfg.head_dim)
    return query, randn(rows, cfg.num_kv_heads, cfg.head_dim, 2 * KEY_BLOCK)


def position_free(product: Callable, inputs: tuple[torch.Tensor, ...], fresh: Callable) -> bool:
    """Whether `product` gives each row the same bits wherever it sits among a fixed number of
    rows and whatever the other rows hold: the rows rolled by one and by half, and the second half
    replaced by `fresh(tensor)` (new values of the same shape)."""
    full = product(*inputs)
    rows = full.shape[0]
    for shift in dict.fromkeys((1, rows // 2)):
        if not torch.equal(product(*(x.roll(shift, 0) for x in inputs)), full.roll(shift, 0)):
            return False
    half = rows // 2
    mixed = tuple(torch.cat([x[:half], fresh(x[half:])]) for x in inputs)
    return torch.equal(product(*mixed)[:half], full[:half])


@torch.inference_mode()
def fixed_blocks_are_invariant(model: torch.nn.Module, rows: int) -> bool:
    """True when, in products of exactly `rows` rows, every product of the talker `model`'s decode
    step (as `one_block_is_invariant` lists them) gives a row the same bits at any place in the
    block and with any other rows beside it: what fixed blocks of `rows` rows rely on."""
    param = next(model.parameters())
    cfg = model.cfg.backbone
    exact = torch.float64 if param.dtype == torch.float64 else torch.float32
    shapes = sorted(linear_shapes(model), key=str)
    key = ("fixed", tuple(shapes), rows, str(param.device), torch.get_num_threads(), model.packed)
    if key not in _VERDICTS:
        generator = torch.Generator(device=param.device).manual_seed(0)

        def randn(*size, dtype=exact):
            return torch.randn(*size, generator=generator, device=param.device, dtype=dtype)

        def fresh(x):
            return randn(*x.shape, dtype=x.dtype)

        verdict = position_free(torch.matmul, _attention_inputs(cfg, rows, randn), fresh)
        for out, inp, bias, dtype in shapes if verdict else ():
            weight, shift = randn(out, inp, dtype=dtype), randn(out, dtype=dtype) if bias else None
            weight = kernels.pack(weight) if model.packed else weight
            if not position_free(lambda x: kernels.linear(x, weight, shift), (randn(rows, inp, dtype=dtype),), fresh):
                verdict = False
                break
        _VERDICTS[key] = verdict
    return _VERDICTS[key]
