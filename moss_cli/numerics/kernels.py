"""Which kernel computes a linear layer (the plain one, or oneDNN's on a weight packed ahead of
time), and the tiled linear: products in fixed row tiles, so a row's bits do not depend on how many
rows come with it.

On a CPU, oneDNN multiplies a few rows by a weight laid out for it (packed once, at load) about
1.5x faster than the plain kernel reads the row-major weight (measured here: 131 vs 218 us for
8 x 512 by 512 x 1536 in float32, 1.9 vs 3.4 ms for 8 x 2560 by 2560 x 9728 in bfloat16). A packed
weight is an opaque tensor of the same shape and dtype that only this product can read, so a
model packs its weights only for eager CPU inference (torch.compile cannot trace it).
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F

from .tiles import RowTiles

PACKED_ROWS_HINT = 8  # the row count oneDNN lays a weight out for; any row count still works


def can_pack(weight: torch.Tensor) -> bool:
    """Whether `weight` can be packed for oneDNN here (CPU, float32 or bfloat16, and a CPU whose
    instructions oneDNN's bfloat16 path needs: AVX-512 or AVX-NE-CONVERT; an AVX2-only CPU packs
    float32 only)."""
    return (
        weight.device.type == "cpu"
        and weight.dtype in (torch.float32, torch.bfloat16)
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and _packs(weight.dtype)
    )


def as_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x in `dtype`, with no call at all when it already is (a decode step makes many small ops)."""
    return x if x.dtype == dtype else x.to(dtype)


@functools.cache
def _packs(dtype: torch.dtype) -> bool:
    """oneDNN states its CPU requirements only by refusing: pack a small weight once per dtype."""
    try:
        pack(torch.zeros(8, 8, dtype=dtype))
    except RuntimeError:
        return False
    return True


def pack(weight: torch.Tensor) -> torch.Tensor:
    """The weight [out, in] laid out for oneDNN's product (an opaque tensor of the same shape)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACKED_ROWS_HINT)


@torch.no_grad()
def pack_linears(module: nn.Module) -> None:
    """Replace the weight of every nn.Linear in `module` by its packed form (its forward must then
    go through `linear`, as moss's own layers do)."""
    for m in module.modules():
        if isinstance(m, nn.Linear) and not m.weight.is_mkldnn:
            m.weight = nn.Parameter(pack(m.weight), requires_grad=False)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, for a plain or a packed weight."""
    if not weight.is_mkldnn:
        return F.linear(x, weight, bias)
    if x.is_contiguous() and x.numel():  # the product takes any leading shape (the same bits as 2-D rows)
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] == 0:
        return x.new_zeros(*x.shape[:-1], weight.shape[0])
    if not rows.is_contiguous():
        rows = rows.contiguous()
    out = torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "none", [], "")
    return out.reshape(*x.shape[:-1], weight.shape[0])


def tiled_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, tiles: RowTiles | None = None
) -> torch.Tensor:
    """A linear product (plain or packed weight, `linear`), or, with `tiles`, one product per
    fixed tile of rows (the input padded with zero rows). A GEMM rounds a row differently for
    different row counts; with fixed tiles a row's result depends only on that row, however many
    rows come with it. One product per tile reads the weight as a plain matrix: a batched product
    over a broadcast weight costs up to 5x more in bfloat16."""
    if tiles is None:
        return linear(x, weight, bias)
    out = in_row_tiles(x, tiles, lambda tile: linear(tile, weight))
    return out if bias is None else out + bias


def in_row_tiles(x: torch.Tensor, tiles: RowTiles | None, rows_fn) -> torch.Tensor:
    """`rows_fn` (matrix products and row-wise ops: a tile's zero padding rows may come out as
    anything, they are dropped) applied to x [..., D] in fixed tiles of rows -> [..., D'] (to x
    whole without `tiles`). Several products in a row (an MLP) share one padding and one
    concatenation."""
    if tiles is None or x.numel() == 0:
        return rows_fn(x)
    # Row-major rows, as the probe verified: a transposed view (a 1x1 conv's input) would hand the
    # GEMM a layout, and a leading dimension set by the clip's length, that it may round apart.
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    rows = flat.shape[0]
    whole = rows - rows % tiles.rows
    parts = [rows_fn(tile) for tile in flat[:whole].split(tiles.rows)]
    if whole < rows:
        rest = rows - whole
        parts.append(rows_fn(F.pad(flat[whole:], (0, 0, 0, tiles.padded(rest) - rest))))
    out = torch.cat(parts) if len(parts) > 1 else parts[0]
    return out[:rows].reshape(*x.shape[:-1], out.shape[-1])
