"""`--compile`: the frame (local transformer, heads, block sampler) as one torch.compile graph.

The frame has one fixed shape per block in batch-invariant mode (blocks of the run's block rows), so
it compiles once and a row's numbers still do not depend on its neighbours (the audit checks this
at `--level bitwise`). On CUDA that one shape is also captured as a CUDA graph (torch.compile's
"reduce-overhead" mode): a frame is a few hundred small kernels, and replaying them as one graph
removes their launch costs, which dominate a decode step at small batches. The
backbone step stays eager: its attention spans grow every step, and its time is in matrix
products that compiling does not change. Compiling takes seconds to minutes; the time spent is
kept so commands can report it.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

_COMPILED: dict[tuple[Callable, bool, bool], Callable] = {}  # one compiled function per process, shared by engines
_SEEN: set[tuple] = set()  # signatures already compiled in this process
_SPENT = {"seconds": 0.0}  # compile time in this process, over all engines


def compile_seconds() -> float:
    """Wall time spent compiling frame graphs in this process so far."""
    return _SPENT["seconds"]


class CompileError(RuntimeError):
    """torch.compile could not build the frame here (e.g. no C++ compiler for the CPU backend)."""


def uses_cuda_graphs(fixed_shape: bool, device_type: str) -> bool:
    """A fixed-shape frame on CUDA replays as a CUDA graph (a shape that changes would re-record)."""
    return fixed_shape and device_type == "cuda"


class CompiledFrame:
    def __init__(self, fn: Callable, *, fixed_shape: bool, device_type: str = "cpu") -> None:
        self.graphs = uses_cuda_graphs(fixed_shape, device_type)
        key = (fn, fixed_shape, self.graphs)
        if key not in _COMPILED:
            # Fixed blocks: one static graph. The fast mode's blocks change size with the batch.
            mode = "reduce-overhead" if self.graphs else None
            _COMPILED[key] = torch.compile(fn, dynamic=False if fixed_shape else None, mode=mode)
        self.fn = _COMPILED[key]
        self.compile_s = 0.0  # wall time of the calls that compiled a new graph

    def __call__(self, model: torch.nn.Module, hidden: torch.Tensor, draws) -> tuple:
        signature = (id(model), tuple(hidden.shape), hidden.dtype, hidden.device.type, draws.seen is None)
        start = time.perf_counter()
        try:
            if self.graphs:  # each frame is a new step: the last replay's outputs were copied out
                torch.compiler.cudagraph_mark_step_begin()
            out = self.fn(model, hidden, draws)
        except Exception as error:  # inductor reports many kinds of failure
            if signature in _SEEN:
                raise
            raise CompileError(f"torch.compile failed: {type(error).__name__}: {error}".splitlines()[0]) from error
        if signature not in _SEEN:
            _SEEN.add(signature)
            spent = time.perf_counter() - start
            self.compile_s += spent
            _SPENT["seconds"] += spent
        if self.graphs:  # a replay writes into the same output buffers: the engine keeps these codes
            out = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in out)
        return out
