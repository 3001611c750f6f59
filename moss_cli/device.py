"""Choosing the device and dtype a model runs on."""

from __future__ import annotations

import importlib.util

import torch

from .errors import MossError

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float64": torch.float64,
    "fp64": torch.float64,
    "double": torch.float64,
}


def npu_available() -> bool:
    """True when the Ascend plugin is importable and sees a device."""
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch_npu  # noqa: F401  (registers the "npu" device type)
    except Exception:
        return False
    return bool(getattr(torch, "npu", None) and torch.npu.is_available())


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """Map "auto" to cuda, then npu, then cpu; validate an explicit choice."""
    if isinstance(device, torch.device):
        return device
    name = (device or "auto").strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if npu_available():
            return torch.device("npu")
        return torch.device("cpu")
    kind = name.split(":", 1)[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise MossError("device 'cuda' was requested but torch sees no CUDA device", field="device")
    if kind == "npu" and not npu_available():
        raise MossError("device 'npu' was requested but torch_npu is not installed or sees no NPU", field="device")
    if kind not in ("cpu", "cuda", "npu"):
        raise MossError(f"unknown device {device!r}; expected auto, cpu, cuda or npu", field="device")
    return torch.device(name)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Map a dtype name to torch; "auto" means bf16 on accelerators and fp32 on CPU."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise MossError(f"unsupported dtype {dtype}", field="dtype")
        return dtype
    name = (dtype or "auto").strip().lower()
    if name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if name not in DTYPES:
        raise MossError(
            f"unknown dtype {dtype!r}; expected one of auto, float32, bfloat16, float16, float64", field="dtype"
        )
    return DTYPES[name]
