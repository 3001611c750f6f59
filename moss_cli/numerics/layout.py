"""The layout a run computes in, fixed once: by the engine at construction (how a decode step and a
prefill are padded) and by the codec at load (its row tiles). A run's environment reads it from
there, never probing again: a probe's verdict depends on the thread count of the thread that
runs it, so only the layout the engine was built with says what it computes.

A decode step runs in one of two layouts:
- one block for the whole batch, padded to a multiple of a small unit, where the probes
  (`probes.py`) find that this platform gives a row the same bits at every such row count up to
  the run's --max-batch and at `engine_block` rows. Its bits are those of fixed `engine_block`-row
  blocks, so they hold across --max-batch values too;
- elsewhere (or when forced), fixed blocks of R rows: R = --max-batch (at most MAX_BLOCK_ROWS), so a
  full batch is one product that reads each weight once, as the fast mode's is, and a row's bits do
  not depend on its neighbours or its place in the block (probed; fixed row counts give that on
  any platform we know). Its bits depend on R: across --max-batch values they hold only where the
  run pins R (`--layout blocks:R`).
Where verified, prompts admitted together also share a prefill forward and the codec runs taller tiles.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from . import MAX_BLOCK_ROWS, Numerics, probes
from .tiles import RowTiles

PREFILL_STEP = 32  # a shared prefill forward has a multiple of this many rows (few sizes to verify)
# One block is verified up to this many rows as an engine is built (beyond, when a larger batch forms).
WIDE_PROBE_ROWS = 64


@dataclass(frozen=True)
class PrefillLayout:
    """Prompts admitted together share forwards of at most `rows` rows. Each prompt starts at a
    multiple of `unit` rows, and a forward is padded to a multiple of `step` rows. A prompt longer
    than `rows` is prefilled alone, unpadded."""

    rows: int
    unit: int
    step: int = 1

    def padded(self, rows: int) -> int:
        return -(-rows // self.step) * self.step

    def __str__(self) -> str:
        return f"prompts share forwards of up to {self.rows} rows" + f", padded to {self.step}" * (self.step > 1)


def prefill_layout(model: torch.nn.Module, numerics: Numerics) -> PrefillLayout | None:
    """How the talker `model` prefills prompts: grouped (fast mode; or batch-invariant where every
    multiple of `step` rows up to `rows` gives a prompt row the same bits, so a prompt's keys and
    hidden state do not depend on the prompts it shares a forward with) or None: one prompt per
    forward."""
    if not numerics.batch_invariant:
        return PrefillLayout(numerics.prefill_rows, 1)
    unit, rows = numerics.wide_unit, numerics.prefill_rows
    if not numerics.wide_blocks or rows < PREFILL_STEP or PREFILL_STEP % unit:
        return None
    shapes = probes.linear_shapes(model.transformer)  # prefill runs the backbone only
    device = next(model.parameters()).device
    if not probes.linears_agree(shapes, unit, range(PREFILL_STEP, rows + 1, PREFILL_STEP), device, model.packed):
        return None
    return PrefillLayout(rows - rows % PREFILL_STEP, unit, PREFILL_STEP)


def wide_unit(model: torch.nn.Module, numerics: Numerics, max_batch: int, compile: bool = False) -> int | None:
    """The row count a one-block decode step is padded to a multiple of: the smallest of 1, 2, 4 ...
    (up to `numerics.wide_unit`) at which this platform is verified to give a row the same bits, or
    None: fixed blocks (fast mode has no blocks at all; a compiled frame keeps one shape). Every
    verified unit agrees with the fixed block's size, so runs that pick different units (another
    --max-batch) still give a row the same bits."""
    block = numerics.engine_rows
    if not block or not numerics.wide_blocks or numerics.layout != "auto" or compile:
        return None
    unit = 1
    while unit <= numerics.wide_unit:
        if numerics.wide_unit % unit == 0 and probes.wide_blocks_are_invariant(model, unit, block, max_batch):
            return unit
        unit *= 2
    return None


@dataclass(frozen=True)
class EngineLayout:
    """How an engine computes, fixed when it is built. `wide_unit`: a decode step is one block
    padded to a multiple of this many rows, verified up to `probed_rows` rows (the engine verifies
    a larger batch when one forms, falling back to blocks of `block_rows` = `engine_block` rows,
    with the same bits, where that fails), or None: fixed blocks of `block_rows` rows (None:
    unpadded, the fast mode). `prefill`: how prompts admitted together are prefilled (None: one per
    forward). `packed`: the linear layers run oneDNN's product on packed weights (`kernels`)."""

    numerics: Numerics
    compile: bool
    probed_rows: int
    wide_unit: int | None
    prefill: PrefillLayout | None
    packed: bool
    block_rows: int | None

    @classmethod
    def fix(cls, model: torch.nn.Module, numerics: Numerics, max_batch: int, compile: bool = False) -> EngineLayout:
        """Probe this platform for the talker `model` (on the calling thread, whose thread count
        the verdicts depend on: the thread that runs the engine)."""
        prefill = prefill_layout(model, numerics)
        layout = cls(numerics, compile, 0, None, prefill, model.packed, None)
        if not numerics.batch_invariant:
            return layout
        if numerics.layout == "auto" and numerics.wide_blocks and not compile:
            probed = min(max_batch, WIDE_PROBE_ROWS)
            unit = wide_unit(model, numerics, probed, compile)
            if unit is not None:
                return replace(layout, probed_rows=probed, wide_unit=unit, block_rows=numerics.engine_block)
        return replace(layout, block_rows=fixed_block_rows(model, numerics, max_batch))

    def rows(self, batch: int) -> int:
        """The rows a decode step of `batch` requests computes, padding included (as first laid out)."""
        if not self.block_rows:
            return batch
        unit = self.wide_unit or self.block_rows
        return unit * -(-batch // unit)

    @property
    def steps(self) -> str:
        """How a decode step is shaped, in words (a run's environment records it)."""
        if not self.block_rows:
            return "unpadded"
        if self.wide_unit is None:
            return f"blocks of {self.block_rows}"
        return "one block" if self.wide_unit == 1 else f"one block padded to a multiple of {self.wide_unit}"


def fixed_block_rows(model: torch.nn.Module, numerics: Numerics, max_batch: int) -> int:
    """The rows of each fixed decode block: the forced count, or --max-batch (at most
    MAX_BLOCK_ROWS) where a probe finds a row's bits independent of its place and neighbours at that
    count, else `engine_block` (wide_blocks off: always `engine_block`, the reference policy)."""
    if numerics.block_rows is not None:
        return numerics.block_rows
    if numerics.layout == "auto" and not numerics.wide_blocks:
        return numerics.engine_block
    rows = min(max_batch, MAX_BLOCK_ROWS)
    return rows if probes.fixed_blocks_are_invariant(model, rows) else numerics.engine_block


def codec_tiles(codec: torch.nn.Module, numerics: Numerics | None) -> RowTiles | None:
    """The row tiles an `AudioCodec` fixes at load under `numerics` (None: plain kernels). Where
    this platform gives a row the same bits at every row count of a ladder as in a full tile,
    products run in the tallest verified tiles (`numerics.codec_tall_tile` rows: a long clip reads
    each weight fewer times) and a short last tile is padded only to `numerics.wide_unit` rows;
    elsewhere, tiles of `numerics.codec_tile` rows, padded whole. Each ladder holds `codec_tile`,
    so all of them give a waveform the same bits."""
    if numerics is None or numerics.codec_rows is None:
        return None
    rows, unit = numerics.codec_rows, numerics.wide_unit
    if numerics.wide_blocks and unit < rows and rows % unit == 0:
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
        "engine_steps": engine.steps,
        "prefill": "one prompt per forward" if engine.prefill is None else str(engine.prefill),
        "codec_tiles": "plain" if codec is None else str(codec),
    }
