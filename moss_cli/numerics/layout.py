"""The layout a run computes in, fixed once: by the engine at construction (how a decode step and a
prefill are padded) and by the codec at load (its row tiles). A run's environment reads it from
there, never probing again: a probe's verdict depends on the thread count of the thread that
runs it, so only the layout the engine was built with says what it computes.

A decode step (`StepLayout`) runs in one of two padded layouts:
- `Steps.ONE_BLOCK`: one block for the whole batch, padded to a multiple of a small unit, where the
  probes (`probes.py`) find that this platform gives a row the same bits at every such row count
  up to the run's --max-batch and at `engine_block` rows. Its bits are those of fixed
  `engine_block`-row blocks, so they hold across --max-batch values too;
- `Steps.BLOCKS`: elsewhere (or when forced), fixed blocks of R rows: R = --max-batch (at most
  MAX_BLOCK_ROWS), so a full batch is one product that reads each weight once, as the fast mode's
  is, and a row's bits do not depend on its neighbours or its place in the block (probed; fixed row
  counts give that on any platform we know). Its bits depend on R: across --max-batch values they
  hold only where the run pins R (`--layout blocks:R`).
The fast mode's steps are `Steps.UNPADDED`. Where verified, prompts admitted together also share
a prefill forward (`PrefillLayout`) and the codec runs taller tiles (`codec_tiles`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

import torch

from . import MAX_BLOCK_ROWS, Numerics, probes
from .tiles import RowTiles

PREFILL_STEP = 32  # a shared prefill forward has a multiple of this many rows (few sizes to verify)
# One block is verified up to this many rows as an engine is built (beyond, when a larger batch forms).
ONE_BLOCK_PROBE_ROWS = 64


def _round_up(rows: int, unit: int) -> int:
    return -(-rows // unit) * unit


@dataclass(frozen=True)
class PrefillLayout:
    """Prompts admitted together share forwards of at most `rows` rows. Each prompt starts at a
    multiple of `unit` rows, and a forward is padded to a multiple of `step` rows. A prompt longer
    than `rows` is prefilled alone, unpadded."""

    rows: int
    unit: int
    step: int = 1

    def padded(self, rows: int) -> int:
        return _round_up(rows, self.step)

    def __str__(self) -> str:
        return f"prompts share forwards of up to {self.rows} rows" + f", padded to {self.step}" * (self.step > 1)


def prefill_groups(lengths: list[int], layout: PrefillLayout | None) -> list[tuple[list[int], bool]]:
    """(indices of the prompts sharing a forward, whether it is laid out by `layout`) per forward;
    prompts fill forwards in input order.
    A prompt's treatment depends only on its own length: one longer than a forward (or any, without
    a layout) has a forward of its own, unpadded; the others start at a multiple of the unit in a
    forward padded to a multiple of the layout's step, wherever they land."""
    groups: list[tuple[list[int], bool]] = []
    current: list[int] = []
    used = 0
    for i, length in enumerate(lengths):
        if layout is None or layout.padded(length) > layout.rows:
            groups.append(([i], False))
            continue
        start = _round_up(used, layout.unit)
        if current and layout.padded(start + length) > layout.rows:
            groups.append((current, True))
            current, start = [], 0
        current.append(i)
        used = start + length
    if current:
        groups.append((current, True))
    return groups


def prefill_spans(lengths: list[int], layout: PrefillLayout | None) -> tuple[list[tuple[int, int]], int]:
    """Where each prompt of one forward sits, [start, stop) rows, and the forward's padded width:
    each at a multiple of the layout's unit, the width one of the row counts it allows (in
    batch-invariant mode, verified). None: a forward of its own, unpadded."""
    unit = layout.unit if layout is not None else 1
    spans, width = [], 0
    for length in lengths:
        start = _round_up(width, unit)
        spans.append((start, start + length))
        width = spans[-1][1]
    return spans, width if layout is None else layout.padded(width)


def prefill_layout(model: torch.nn.Module, numerics: Numerics) -> PrefillLayout | None:
    """How the talker `model` prefills prompts: grouped (fast mode; or batch-invariant where every
    multiple of `step` rows up to `rows` gives a prompt row the same bits, so a prompt's keys and
    hidden state do not depend on the prompts it shares a forward with) or None: one prompt per
    forward."""
    if not numerics.batch_invariant:
        return PrefillLayout(numerics.prefill_rows, 1)
    unit, rows = numerics.pad_unit, numerics.prefill_rows
    if not numerics.probe or rows < PREFILL_STEP or PREFILL_STEP % unit:
        return None
    shapes = probes.linear_shapes(model.transformer)  # prefill runs the backbone only
    device = next(model.parameters()).device
    if not probes.linears_agree(shapes, unit, range(PREFILL_STEP, rows + 1, PREFILL_STEP), device, model.packed):
        return None
    return PrefillLayout(rows - rows % PREFILL_STEP, unit, PREFILL_STEP)


class Steps(Enum):
    """How a decode step's rows are laid out."""

    UNPADDED = "unpadded"  # the fast mode: the batch as it is
    ONE_BLOCK = "one block"  # the whole batch in one block, padded to a multiple of a unit
    BLOCKS = "blocks"  # fixed blocks of a number of rows
    BUCKETED = "bucketed"  # the fast mode's graphs: one block padded to a power of two rows, at most `rows`


@dataclass(frozen=True)
class StepLayout:
    """A decode step's layout. `rows`: the fixed block's rows (BLOCKS: every block's; ONE_BLOCK: the
    block whose bits it gives). `unit`: ONE_BLOCK's padding unit, verified up to `probed` rows.
    `str` is what a run's environment records as `engine_steps`."""

    kind: Steps
    rows: int | None = None
    unit: int | None = None
    probed: int = 0

    def padded(self, batch: int) -> int:
        """The rows a decode step of `batch` requests computes, padding included: the one padding
        rule (the engine lays its steps out by it, the bench sizes its memory by it)."""
        if self.kind is Steps.UNPADDED:
            return batch
        if self.kind is Steps.BUCKETED:
            return min(1 << (batch - 1).bit_length(), max(self.rows, batch))
        return _round_up(batch, self.unit if self.kind is Steps.ONE_BLOCK else self.rows)

    def blocks(self, batch: int) -> list[tuple[int, int, int]]:
        """(first row, end row, rows computed) of each block of a step of `batch` requests."""
        if self.kind is not Steps.BLOCKS:
            return [(0, batch, self.padded(batch))]
        return [(i, min(i + self.rows, batch), self.rows) for i in range(0, batch, self.rows)]

    def places(self, going: list[int], size: int) -> tuple[list[int], int]:
        """Where the rows that go on (their places in a block of `size` rows) sit in the backbone
        step, and its rows: a padded layout keeps each row in its place and the block's shape; the
        fast mode packs them."""
        if self.kind is Steps.UNPADDED:
            return list(range(len(going))), len(going)
        return going, size

    def __str__(self) -> str:
        if self.kind is Steps.UNPADDED:
            return "unpadded"
        if self.kind is Steps.BLOCKS:
            return f"blocks of {self.rows}"
        if self.kind is Steps.BUCKETED:
            return f"one block of a power of two rows, at most {self.rows}"
        return "one block" if self.unit == 1 else f"one block padded to a multiple of {self.unit}"


UNPADDED = StepLayout(Steps.UNPADDED)


def one_block_unit(model: torch.nn.Module, numerics: Numerics, max_batch: int) -> int | None:
    """The row count a one-block decode step is padded to a multiple of: the smallest of 1, 2, 4 ...
    (up to `numerics.pad_unit`) at which this platform is verified to give a row the same bits, or
    None: fixed blocks. Every verified unit agrees with the fixed block's size, so runs that pick
    different units (another --max-batch) still give a row the same bits."""
    unit, block = 1, numerics.engine_block
    while unit <= numerics.pad_unit:
        if numerics.pad_unit % unit == 0 and probes.one_block_is_invariant(model, unit, block, max_batch):
            return unit
        unit *= 2
    return None


def one_block(model: torch.nn.Module, numerics: Numerics, rows: int) -> StepLayout | None:
    """One block verified up to `rows` rows, or None where a product fails."""
    unit = one_block_unit(model, numerics, rows)
    return None if unit is None else StepLayout(Steps.ONE_BLOCK, numerics.engine_block, unit, rows)


def grown(steps: StepLayout, model: torch.nn.Module, numerics: Numerics, batch: int, max_batch: int) -> StepLayout:
    """`steps` for a batch of `batch` requests: one block verified past its probed rows (at least
    doubling them, so a growing batch is probed a few times) or, where a product fails, fixed
    blocks of `engine_block` rows from then on. Every verified size gives a row the bits of the
    fixed block, so a switch changes no bits."""
    if steps.kind is not Steps.ONE_BLOCK or batch <= steps.probed:
        return steps
    rows = min(max_batch, max(batch, 2 * steps.probed))
    return one_block(model, numerics, rows) or replace(steps, kind=Steps.BLOCKS, unit=None, probed=rows)


@dataclass(frozen=True)
class EngineLayout:
    """How an engine computes, fixed when it is built: `steps` (the decode step's layout, as first
    laid out: a one-block layout may grow, `grown`), `prefill` (how prompts admitted together are
    prefilled; None: one per forward), `packed` (the linear layers run oneDNN's product on packed
    weights, `kernels`), for `numerics`, `compile` (a compiled frame keeps one shape) and `graphs`
    (each block's whole step is one graph of a few shapes: fixed blocks, or in the fast mode one
    block padded to a power of two rows)."""

    numerics: Numerics
    compile: bool
    steps: StepLayout
    prefill: PrefillLayout | None
    packed: bool
    graphs: bool = False

    @classmethod
    def fix(
        cls, model: torch.nn.Module, numerics: Numerics, max_batch: int, compile: bool = False, graphs: bool = False
    ) -> EngineLayout:
        """Probe this platform for the talker `model` (on the calling thread, whose thread count
        the verdicts depend on: the thread that runs the engine)."""
        prefill = prefill_layout(model, numerics)
        layout = cls(numerics, compile, UNPADDED, prefill, model.packed, graphs)
        if not numerics.batch_invariant:
            return replace(layout, steps=StepLayout(Steps.BUCKETED, max_batch)) if graphs else layout
        steps = None
        if not numerics.layout.fixed and numerics.probe and not (compile or graphs):
            steps = one_block(model, numerics, min(max_batch, ONE_BLOCK_PROBE_ROWS))
        steps = steps or StepLayout(Steps.BLOCKS, fixed_block_rows(model, numerics, max_batch))
        return replace(layout, steps=steps)


def fixed_block_rows(model: torch.nn.Module, numerics: Numerics, max_batch: int) -> int:
    """The rows of each fixed decode block: the forced count, or --max-batch (at most
    MAX_BLOCK_ROWS) where a probe finds a row's bits independent of its place and neighbours at that
    count, else `engine_block` (`probe` off with the layout auto: always `engine_block`, the
    reference policy)."""
    if numerics.layout.rows is not None:
        return numerics.layout.rows
    if not numerics.layout.fixed and not numerics.probe:
        return numerics.engine_block
    rows = min(max_batch, MAX_BLOCK_ROWS)
    return rows if probes.fixed_blocks_are_invariant(model, rows) else numerics.engine_block


def most_step_rows(numerics: Numerics, batch: int) -> int:
    """The most rows a decode step of `batch` requests may compute under `numerics`, before any
    probe (the fixed blocks a probe may fall back to are the largest layout it can choose)."""
    if not numerics.batch_invariant:
        return UNPADDED.padded(batch)
    rows = numerics.layout.rows or max(numerics.engine_block, min(batch, MAX_BLOCK_ROWS))
    return StepLayout(Steps.BLOCKS, rows).padded(batch)


def codec_tiles(codec: torch.nn.Module, numerics: Numerics | None) -> RowTiles | None:
    """The row tiles an `AudioCodec` fixes at load under `numerics` (None: plain kernels). Where
    this platform gives a row the same bits at every row count of a ladder as in a full tile,
    products run in the tallest verified tiles (`numerics.codec_tall_tile` rows: a long clip reads
    each weight fewer times) and a short last tile is padded only to `numerics.pad_unit` rows;
    elsewhere, tiles of `numerics.codec_tile` rows, padded whole. Each ladder holds `codec_tile`,
    so all of them give a waveform the same bits."""
    if numerics is None or numerics.codec_rows is None:
        return None
    rows, unit = numerics.codec_rows, numerics.pad_unit
    if numerics.probe and unit < rows and rows % unit == 0:
        device = next(codec.parameters()).device
        for tall in dict.fromkeys((numerics.codec_tall_tile, rows)):  # each ladder probed once
            tiles = RowTiles(tall, unit, rows)
            if probes.linears_agree(codec.tiled_shapes(), unit, tiles.sizes, device, codec.packed):
                return tiles
    return RowTiles.whole(rows)


def recorded(engine: EngineLayout, codec: RowTiles | None) -> dict[str, str]:
    """The environment's fields for an engine's and a codec's layout, as they were fixed."""
    return {
        "linear_kernel": "onednn-packed" if engine.packed else "plain",
        "engine_steps": str(engine.steps),
        "prefill": "one prompt per forward" if engine.prefill is None else str(engine.prefill),
        "codec_tiles": "plain" if codec is None else str(codec),
    }
