"""Does this platform's matrix product give a row the same bits at other row counts? Measured.

A GEMM may round a row differently for different row counts (another kernel, another split of
the reduction); fixed-size tiles avoid the question anywhere, at the price of padding. Many CPU
libraries, though, compute a row the same way for every row count that is a multiple of a small
unit. Where a probe of the real shapes shows that, padding can stop at that unit. The verdict
depends on the library, device, dtype, shapes and thread count, so it is measured for each, once
per process; one differing bit and the caller keeps its full padding.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from . import kernels

# (out features, in features, has bias, dtype): one product shape
Shape = tuple[int, int, bool, torch.dtype]
_VERDICTS: dict[tuple, bool] = {}


def rows_agree(product: Callable, inputs: tuple[torch.Tensor, ...], sizes: Iterable[int], offset: int) -> bool:
    """Whether `product(*inputs)` gives rows start..start+n the same bits when given only those
    rows, for every n in `sizes`, at start 0 and at `offset`."""
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
    gives each row the same bits at every row count in `sizes` as in a product of max(sizes) + unit
    rows (random inputs and weights: the kernel a library picks depends on shapes, strides and
    dtype, not on values)."""
    shapes, sizes = sorted(set(shapes), key=str), sorted(set(sizes))
    key = (tuple(shapes), unit, tuple(sizes), str(device), torch.get_num_threads(), packed)
    if key not in _VERDICTS:
        generator = torch.Generator(device=device).manual_seed(0)
        verdict = True
        for out, inp, bias, dtype in shapes:

            def randn(*size, dtype=dtype):
                return torch.randn(*size, generator=generator, device=device, dtype=dtype)

            weight, shift = randn(out, inp), randn(out) if bias else None
            weight = kernels.pack(weight) if packed else weight
            x = randn(sizes[-1] + unit, inp)
            if not rows_agree(lambda rows: kernels.linear(rows, weight, shift), (x,), sizes, unit):
                verdict = False
                break
        _VERDICTS[key] = verdict
    return _VERDICTS[key]
