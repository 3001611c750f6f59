"""Which kernel computes a linear layer: the plain one, or oneDNN's on a weight packed ahead of time.

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
