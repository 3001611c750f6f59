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


class StepGraphs:
    """`--graphs`: a block's whole decode step (`step.whole_step`) as one graph per shape (block
    rows, key width, whether rows carry a repetition penalty).

    On CUDA each shape is captured once as a CUDA graph (`torch.cuda.CUDAGraph`) over inputs of its
    own (`StepInputs.cloned`), and replayed after copying a step's inputs into them: a decode step
    is hundreds of small kernels, whose launches a replay removes. The step asks the host nothing
    and draws no random numbers (a frame's uniforms are drawn before it), so a replay computes what
    the eager step does. A graph holds the KV pool's addresses: when the pool grows, they are
    captured again. Elsewhere nothing is captured: the same fixed-shape step runs as it is (this
    is how CI checks it). With `compile`, torch.compile builds the step first (`fullgraph=True`).
    Capturing and compiling count in `compile_seconds`."""

    def __init__(self, fn: Callable, *, compile: bool, device_type: str) -> None:
        self.fn = torch.compile(fn, fullgraph=True, dynamic=False) if compile else fn
        self.compiling = compile
        self.capture = device_type == "cuda"
        self.captured: dict[tuple, _Captured] = {}
        self.pool_at: tuple[int, ...] = ()  # the KV pool the graphs were captured over
        self.memory = None  # one memory pool shared by the graphs (they replay one at a time)
        self.seen: set[tuple] = set()
        self.spent_s = 0.0

    def __call__(self, model: torch.nn.Module, pool, inputs, width: int) -> tuple[torch.Tensor, ...]:
        shape = (tuple(inputs.hidden.shape), width, inputs.draws.seen is None)
        start = time.perf_counter()
        if not self.capture:
            out = self._run(self.fn, model, pool, inputs, width, shape in self.seen)
        else:
            at = (pool.keys.data_ptr(), pool.values.data_ptr(), pool.filled.data_ptr())
            if at != self.pool_at:  # the pool grew: its old tensors are not read again
                self.captured.clear()
                self.pool_at = at
            if shape not in self.captured:
                if self.memory is None:
                    self.memory = torch.cuda.graph_pool_handle()
                self.captured[shape] = _Captured(self._compiled_fn, model, pool, inputs, width, self.memory)
            out = self.captured[shape].replay(inputs)
        if shape not in self.seen:
            self.seen.add(shape)
            spent = time.perf_counter() - start
            self.spent_s += spent
            _SPENT["seconds"] += spent
        return out

    def _compiled_fn(self, model, pool, inputs, width):
        return self._run(self.fn, model, pool, inputs, width, True)

    def _run(self, fn: Callable, model, pool, inputs, width: int, seen: bool) -> tuple[torch.Tensor, ...]:
        if not self.compiling or seen:
            return fn(model, pool, inputs, width)
        try:
            return fn(model, pool, inputs, width)
        except Exception as error:  # inductor reports many kinds of failure
            raise CompileError(f"torch.compile failed: {type(error).__name__}: {error}".splitlines()[0]) from error


class _Captured:
    """One shape's CUDA graph and the inputs and outputs it was captured with."""

    def __init__(self, fn: Callable, model, pool, inputs, width: int, memory) -> None:
        from .kv_cache import SCRATCH

        self.inputs = inputs.cloned()
        # Warm up (and compile) off the capture, as CUDA graphs require, with every row on the
        # scratch slot: the pool's real rows are neither written nor advanced.
        self.inputs.slots.fill_(SCRATCH)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn(model, pool, self.inputs, width)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=memory):
            self.outputs = fn(model, pool, self.inputs, width)

    def replay(self, inputs) -> tuple[torch.Tensor, ...]:
        self.inputs.load(inputs)
        self.graph.replay()
        # The next replay writes into the same outputs: the engine keeps these.
        return tuple(out.clone() for out in self.outputs)
