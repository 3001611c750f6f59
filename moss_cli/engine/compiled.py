"""Graphs of the decode step, built once per shape and kept for the process.

- `--compile` (`CompiledFrame`): the frame (local transformer, heads, block sampler) as one
  torch.compile graph. The frame has one fixed shape per block in batch-invariant mode (blocks of
  the run's block rows), so it compiles once and a row's numbers still do not depend on its
  neighbours (the audit checks this at `--level bitwise`). On CUDA that one shape is also captured
  as a CUDA graph (torch.compile's "reduce-overhead" mode). The backbone step stays eager.
- `--graphs` (`StepGraphs`): a block's whole step, frame and backbone step over the KV pool, as one
  fixed-shape graph (`frame.whole_step`), captured as a CUDA graph on CUDA (compiled first with
  `--compile`). A decode step is hundreds of small kernels, and at small batches their launches,
  not the arithmetic, set its time on a GPU; a replay launches them as one.

Compiling and capturing take seconds to minutes; the time spent is kept so commands can report it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable

import torch

_COMPILED: dict[tuple[Callable, bool, bool], Callable] = {}  # one compiled function per process, shared by engines
_SEEN: set[tuple] = set()  # signatures already compiled in this process
_SPENT = {"seconds": 0.0}  # compile time in this process, over all engines


def compile_seconds() -> float:
    """Wall time spent compiling frame graphs in this process so far."""
    return _SPENT["seconds"]


def builds(compile: bool, graphs: bool, device_type: str) -> bool:
    """Whether a run compiles or captures anything (so has a compile time to report): --compile, or
    --graphs on CUDA (elsewhere its step runs as it is)."""
    return compile or (graphs and device_type == "cuda")


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

    def __call__(self, model: torch.nn.Module, hidden: torch.Tensor, sampler) -> tuple:
        signature = (id(model), tuple(hidden.shape), hidden.dtype, hidden.device.type, sampler.seen is None)
        start = time.perf_counter()
        try:
            if self.graphs:  # each frame is a new step: the last replay's outputs were copied out
                torch.compiler.cudagraph_mark_step_begin()
            out = self.fn(model, hidden, sampler)
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


_STEP_GRAPHS: dict[tuple, "StepGraphs"] = {}  # one per process and kind, shared by engines
RECOMPILE_MARGIN = 8  # compiles past the shapes seen that dynamo may still make (another model's guards)
MOST_GRAPHS = 64  # captured graphs kept (each holds its own memory); the least recently used go first


def step_graphs(fn: Callable, *, compile: bool, device_type: str) -> StepGraphs:
    """The process's `StepGraphs` of `fn`: engines come and go (one per run), their graphs stay."""
    key = (fn, compile, device_type)
    if key not in _STEP_GRAPHS:
        _STEP_GRAPHS[key] = StepGraphs(fn, compile=compile, device_type=device_type)
    return _STEP_GRAPHS[key]


def shapes_bound(block_sizes: int, pool_blocks: int) -> int:
    """The most shapes the whole step takes over the life of a KV pool that grows to `pool_blocks`
    key blocks (a power of two, as a `few_shapes` pool grows), for `block_sizes` block sizes: per
    block size and repetition penalty (on or off), one per pair of the pool's positions (2^i key
    blocks, i = 0..c) and a key width within them (2^j, j <= i: `runners.key_width`), (c+1)(c+2)/2.
    A generation whose requests arrive together reads one pool size: c+1 widths per block size."""
    c = max(pool_blocks, 1).bit_length() - 1
    return block_sizes * 2 * (c + 1) * (c + 2) // 2


class StepGraphs:
    """`--graphs`: a block's whole decode step (`frame.whole_step`) as one graph per shape (block
    rows, KV pool size, key width, whether rows carry a repetition penalty: `shapes_bound`).

    On CUDA each shape is captured once as a CUDA graph (`torch.cuda.CUDAGraph`) over inputs of its
    own (`StepInputs.cloned`), and replayed after copying a step's inputs into them: a decode step
    is hundreds of small kernels, whose launches a replay removes. The step asks the host nothing
    and draws no random numbers (a frame's uniforms are drawn before it), so a replay computes what
    the eager step does. A graph holds the addresses of the weights and of the KV pool it was
    captured over, so those are part of its key: a pool that grew, or another engine's, is
    captured again. Elsewhere nothing is captured: the same fixed-shape step runs as it is (this
    is how CI checks it). With `compile`, torch.compile builds the step first (`fullgraph=True`,
    one graph per shape: dynamo's recompile limit, 8 by default, is kept above the shapes built,
    and reaching it raises instead of running the step eager unannounced).
    Capturing and compiling count in `compile_seconds`."""

    def __init__(self, fn: Callable, *, compile: bool, device_type: str, backend: str | Callable = "inductor") -> None:
        self.fn = torch.compile(fn, fullgraph=True, dynamic=False, backend=backend) if compile else fn
        self.compiling = compile
        self.capture = device_type == "cuda"
        self.captured: OrderedDict[tuple, _Captured] = OrderedDict()
        # One memory pool shared by the graphs: they replay one at a time on one stream, and each
        # replay's outputs are copied out before the next, so a graph may reuse another's scratch in
        # any order (safe for graphs that never run concurrently: pytorch/pytorch#166975, as vLLM does).
        self.memory = None
        self.shapes: set[tuple] = set()  # the shapes built so far, with the model they were built for

    def __call__(self, model: torch.nn.Module, pool, inputs, width: int) -> tuple[torch.Tensor, ...]:
        pooled = tuple(pool.keys.shape)
        shape = (tuple(inputs.hidden.shape), inputs.hidden.dtype, pooled, width, inputs.sampler.seen is None)
        first = (shape, id(model)) not in self.shapes
        self.shapes.add((shape, id(model)))  # another model's weights are compiled for again
        start = time.perf_counter()
        if self.capture:
            # A graph holds the addresses of the weights and the pool it was captured over.
            buffers = (next(model.parameters()), pool.keys, pool.values, pool.filled)
            key = (shape, id(model), *((b.data_ptr(), tuple(b.shape)) for b in buffers))
            built = key not in self.captured
            out = self._replay(key, model, pool, inputs, width)
        else:
            built = self.compiling and first
            out = self._run(model, pool, inputs, width, first=built)
        if built:
            _SPENT["seconds"] += time.perf_counter() - start
        return out

    def _replay(self, key: tuple, model, pool, inputs, width: int) -> tuple[torch.Tensor, ...]:
        if key not in self.captured:
            if self.memory is None:
                self.memory = torch.cuda.graph_pool_handle()
            while len(self.captured) >= MOST_GRAPHS:
                self.captured.popitem(last=False)
            self.captured[key] = _Captured(self._run, model, pool, inputs, width, self.memory)
        self.captured.move_to_end(key)
        return self.captured[key].replay(inputs)

    def _run(self, model, pool, inputs, width: int, first: bool = False) -> tuple[torch.Tensor, ...]:
        if not self.compiling:
            return self.fn(model, pool, inputs, width)
        # Every shape is a compile of the one function: dynamo counts them against its recompile
        # limit, past which it would run the step eager without a word.
        limit = RECOMPILE_MARGIN + len(self.shapes)
        with torch._dynamo.config.patch(
            recompile_limit=max(limit, torch._dynamo.config.recompile_limit),
            accumulated_recompile_limit=max(limit, torch._dynamo.config.accumulated_recompile_limit),
            fail_on_recompile_limit_hit=True,
        ):
            try:
                return self.fn(model, pool, inputs, width)
            except Exception as error:  # inductor reports many kinds of failure, on the first call
                if not first:
                    raise
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
            fn(model, pool, self.inputs, width, first=True)
            fn(model, pool, self.inputs, width)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: a server decodes audio on other threads while its engine thread captures.
        with torch.cuda.graph(self.graph, pool=memory, capture_error_mode="thread_local"):
            self.outputs = fn(model, pool, self.inputs, width)

    def replay(self, inputs) -> tuple[torch.Tensor, ...]:
        self.inputs.load(inputs)
        self.graph.replay()
        # The next replay writes into the same outputs: the engine keeps these.
        return tuple(out.clone() for out in self.outputs)
