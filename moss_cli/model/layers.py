"""Building blocks shared by the talker and the codec: norms, rotary embeddings, activations.

Numerics follow the reference releases op for op (norm statistics and rotary angles in float32,
results cast back to the activation dtype), so that greedy codes match the reference.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..numerics import kernels
from ..numerics.kernels import as_dtype


class RMSNorm(nn.Module):
    """Qwen3 RMSNorm: statistics in float32, scale applied after casting back."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * rms_normalized(x, self.eps)

    __call__ = forward  # no hooks: a decode step calls dozens of these (see Linear)


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm called without the hook machinery (see Linear)."""

    __call__ = nn.LayerNorm.forward


def rms_normalized(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm before its scale: each row of the last dim over its root mean square, in float32, cast
    back to x's dtype."""
    # One fused op for h * rsqrt(mean(h^2) + eps) (the same bits as those three ops here).
    return as_dtype(F.rms_norm(as_dtype(x, torch.float32), (x.shape[-1],), eps=eps), x.dtype)


class Linear(nn.Linear):
    """nn.Linear whose weight may have been packed for the CPU's oneDNN product (`kernels`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.linear(x, self.weight, self.bias)

    # Called without nn.Module's hook machinery: a decode step makes over a hundred of these calls,
    # and a lone request's step is mostly such fixed costs.
    __call__ = forward


class StackedLinear(Linear):
    """Several projections of the same input as one product: their weights (and biases) stacked
    row-wise, in the order of `parts`, (name, out features) each. A checkpoint stores them apart
    under those names (`checkpoint.stored_layout`); one product reads the input once, and on a GPU
    one larger product uses the memory bandwidth better than several small ones."""

    def __init__(self, in_features: int, parts: list[tuple[str, int]], bias: bool) -> None:
        super().__init__(in_features, sum(rows for _, rows in parts), bias=bias)
        self.parts = parts


def inverse_frequencies(head_dim: int, base: float, device: torch.device) -> torch.Tensor:
    """Rotary inverse frequencies, computed in float32 as in the reference."""
    exponents = torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    return 1.0 / (base**exponents)


def rotate_half_angles(
    positions: torch.Tensor, head_dim: int, base: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin [*positions.shape, head_dim] for NeoX-style RoPE (the two halves of a head
    pair up). The sine carries the rotation's sign (-sin on the first half), so applying it is one
    roll and two products; negating is exact, so the bits are those of rotate-half."""
    inv_freq = inverse_frequencies(head_dim, base, positions.device)
    freqs = positions.to(torch.float32)[..., None] * inv_freq
    sin = freqs.sin()
    return torch.cat((freqs, freqs), dim=-1).cos().to(dtype), torch.cat((-sin, sin), dim=-1).to(dtype)


def apply_rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NeoX-style RoPE on x [..., heads, D] with cos / signed sin broadcastable to it (e.g. [B, T, 1, D]):
    x * cos + rotate_half(x) * sin, where rolling the halves and the sine's sign make rotate_half."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


def interleaved_angles(
    positions: torch.Tensor, head_dim: int, base: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin [*positions.shape, head_dim] for GPT-J-style RoPE (adjacent dims pair up);
    the sine is negated on the even dims, so applying it needs no negation."""
    inv_freq = inverse_frequencies(head_dim, base, positions.device)
    freqs = positions.to(torch.float32)[..., None] * inv_freq
    sin = freqs.sin()
    return freqs.cos().repeat_interleave(2, dim=-1).to(dtype), torch.stack((-sin, sin), dim=-1).flatten(-2).to(dtype)


def apply_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """GPT-J-style RoPE on x [..., D] with cos / signed sin broadcastable to it: pair (x0, x1) ->
    (x0 c - x1 s, x1 c + x0 s), the pairs swapped by one flip."""
    swapped = x.unflatten(-1, (x.shape[-1] // 2, 2)).flip(-1).flatten(-2)
    return x * cos + swapped * sin


def codec_rope(q: torch.Tensor, k: torch.Tensor, offset: int, max_period: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The codec's interleaved RoPE on q, k [B, heads, T, D], angles and products in float32."""
    _, _, t, d = q.shape
    ds = torch.arange(d // 2, device=q.device, dtype=torch.float32)
    freqs = torch.exp(ds * (-math.log(max_period) * 2 / d))
    ts = (torch.arange(t, device=q.device, dtype=torch.float32) + float(offset)).view(1, 1, t, 1)
    cos, sin = torch.cos(freqs * ts), torch.sin(freqs * ts)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        pairs = x.view(*x.shape[:-1], d // 2, 2)
        real, imag = pairs[..., 0].float(), pairs[..., 1].float()
        out = torch.stack([(real * cos - imag * sin).to(x.dtype), (real * sin + imag * cos).to(x.dtype)], dim=-1)
        return out.view(*x.shape)

    return rotate(q), rotate(k)


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    # GPT-2's tanh approximation, written out as Hugging Face's NewGELU does.
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACTIVATIONS = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_new": _gelu_new,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def activation(name: str):
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unsupported activation {name!r}; expected one of {sorted(ACTIVATIONS)}") from None
