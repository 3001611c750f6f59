"""Bitwise batch invariance: one policy, and everything that enforces it.

The property, for every product a request's numbers pass through: a row gets the same bits however
many rows come with it, `mm(a[:k], b) == mm(a, b)[:k]`. Then a request's logits, codes and PCM do
not depend on its neighbours, its place in the batch, the batch size or (for the codec) the chunk
it is decoded in.

The policy: a product runs at a fixed row count (decode blocks of a fixed number of rows, codec
tiles of `CODEC_TILE` rows), where a row depends only on its own inputs on any platform; fewer
padding rows and taller tiles only where a probe of this platform's real shapes finds the same bits
at every row count they use. One switch, `Numerics.batch_invariant`; off, shapes are unpadded
(faster). `Numerics.layout` can force the decode steps' fixed blocks (to measure or test them where
the probe would choose otherwise, or to keep a run's bits across --max-batch values).

    kernels.py  which kernel computes a linear layer (plain, or oneDNN on a packed weight)
    probes.py   does a product give a row the same bits at other row counts? (measured, cached)
    tiles.py    RowTiles, the codec's tile choice, the KV pool's key block
    layout.py   the layout an engine fixes once at construction; a run's environment reads it

One frozen `Numerics` value is handed to the engine and to the codec when they are built, so a run
has one answer to "are my numbers independent of my batch?" and nothing changes it halfway.
"""

from __future__ import annotations

from dataclasses import dataclass

# Any fixed sizes give invariance (at a fixed row count a GEMM row depends only on its own inputs);
# these keep CPU cost flat up to a batch of 8 and a codec chunk of 64 steps.
ENGINE_BLOCK = 8
CODEC_TILE = 64
# Where verified, codec products run in taller tiles (each weight read 4x fewer times), with the same bits.
CODEC_TALL_TILE = 256
WIDE_UNIT = 4  # a single block is padded to a multiple of at most this many rows (the smallest verified)
# Fixed decode blocks hold at most this many rows: a larger batch runs as several blocks.
MAX_BLOCK_ROWS = 256
LAYOUTS = ("auto", "blocks")  # and "blocks:R"
PREFILL_ROWS = 256  # most prompt rows prefilled in one forward (requests admitted together share it)


@dataclass(frozen=True)
class Numerics:
    """`batch_invariant`: every decode step is padded, either to one block of a multiple of
    `wide_unit` rows for the whole batch (`wide_blocks`, where the platform is verified to give a row
    the same bits at every such size and at `engine_block`) or to blocks of exactly `engine_block`
    rows (anywhere) and every codec matrix product runs in tiles of `codec_tile` rows (or, where
    verified to give a row the same bits, of `codec_tall_tile` rows), so a request's logits, codes
    and PCM do not depend on its neighbours. Off: unpadded shapes and plain kernels (faster; a
    row's last bits then follow the batch)."""

    batch_invariant: bool = True
    engine_block: int = ENGINE_BLOCK
    codec_tile: int = CODEC_TILE
    codec_tall_tile: int = CODEC_TALL_TILE
    wide_blocks: bool = True  # one block padded to a multiple of (at most) wide_unit rows, where verified
    wide_unit: int = WIDE_UNIT
    # Prompts admitted together are prefilled in one forward of up to this many rows: in fast mode
    # always, in batch-invariant mode where the probe verifies it (layout.prefill_layout),
    # else one prompt per forward.
    prefill_rows: int = PREFILL_ROWS
    # The decode steps' layout: "auto" (one padded block where verified, else fixed blocks of
    # --max-batch rows), "blocks" (those fixed blocks even where one block is verified), or
    # "blocks:R" (fixed blocks of R rows: the same bits at every --max-batch).
    layout: str = "auto"

    def __post_init__(self) -> None:
        if min(self.engine_block, self.codec_tile, self.wide_unit, self.prefill_rows) < 1:
            raise ValueError("engine_block, wide_unit, codec_tile and prefill_rows must be at least 1")
        if self.codec_tall_tile < self.codec_tile or self.codec_tall_tile % self.codec_tile:
            raise ValueError("codec_tall_tile must be a multiple of codec_tile")
        forced_block_rows(self.layout)  # raises ValueError for anything else

    @property
    def block_rows(self) -> int | None:
        """The rows of the fixed blocks `layout` forces (None: chosen for the run's --max-batch)."""
        return forced_block_rows(self.layout)

    @property
    def engine_rows(self) -> int | None:
        """Rows per decode-step block, or None for unpadded steps."""
        return self.engine_block if self.batch_invariant else None

    @property
    def codec_rows(self) -> int | None:
        """Rows per codec GEMM tile, or None for the plain kernels."""
        return self.codec_tile if self.batch_invariant else None


def forced_block_rows(layout: str) -> int | None:
    """R of a "blocks:R" layout; None for "auto" and "blocks"; ValueError for anything else."""
    if layout in LAYOUTS:
        return None
    kind, _, rows = layout.partition(":")
    if kind == "blocks" and rows.isdigit() and 1 <= int(rows) <= MAX_BLOCK_ROWS:
        return int(rows)
    raise ValueError(f"layout {layout!r}: expected auto, blocks or blocks:R with R from 1 to {MAX_BLOCK_ROWS}")


INVARIANT = Numerics()
FAST = Numerics(batch_invariant=False)
