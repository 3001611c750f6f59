"""Bitwise batch invariance: the property, one switch, and every place that enforces it.

The property, for every product a request's numbers pass through:

    mm(a[:1], b) == mm(a, b)[:1]

a row gets the same bits however many rows come with it and wherever it sits among them. Then a
request's logits, codes and PCM do not depend on its neighbours, its place in the batch, the batch
size or (for the codec) the chunk it is decoded in. The mechanism: a product runs at a fixed row
count (decode blocks of a fixed number of rows, codec tiles of `CODEC_TILE` rows), where a row
depends only on its own inputs on any platform; fewer padding rows and taller tiles only where a
probe of this platform's real shapes finds the same bits at every row count they use. The switch
is `Numerics.batch_invariant`; off, shapes are unpadded (faster, a row's last bits follow the batch).

    kernels.py    which kernel computes a linear layer; the tiled linear (products in row tiles)
    attention.py  the decode attention's fixed key blocks; the codec's query tiles aligned to positions
    tiles.py      RowTiles (the codec's row tiles), the key block
    probes.py     does a product give a row the same bits at other row counts? (measured, cached)
    layout.py     the layout an engine and a codec fix once: decode padding (StepLayout), prefill
                  padding (PrefillLayout), codec tiles; a run's environment reads it from there

One frozen `Numerics` value is handed to the engine's layout and to the codec when they are built,
so a run has one answer to "are my numbers independent of my batch?" and nothing changes it
halfway. Not here: a request's own random stream (engine/sampling.py `random_stream`). It makes a
row's draws independent of its neighbours in both modes, with or without this switch, and it is a
request's seed (sampling semantics, seed precedence), not a property of the arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

# Any fixed sizes give invariance (at a fixed row count a GEMM row depends only on its own inputs);
# these keep CPU cost flat up to a batch of 8 and a codec chunk of 64 steps.
ENGINE_BLOCK = 8
CODEC_TILE = 64
# Where verified, codec products run in taller tiles (each weight read 4x fewer times), with the same bits.
CODEC_TALL_TILE = 256
PAD_UNIT = 4  # padding stops at a multiple of at most this many rows, where verified (the smallest tried first)
# Fixed decode blocks hold at most this many rows: a larger batch runs as several blocks.
MAX_BLOCK_ROWS = 256
PREFILL_ROWS = 256  # most prompt rows prefilled in one forward (requests admitted together share it)


@dataclass(frozen=True)
class Layout:
    """What `--layout` asks of batch-invariant decode steps: "auto" (one padded block where this
    platform is verified to allow it, else fixed blocks of --max-batch rows), "blocks" (`fixed`:
    those fixed blocks even where one block is verified) or "blocks:R" (`rows`: fixed blocks of R
    rows, the same bits at every --max-batch). `str` gives the option's spelling back."""

    fixed: bool = False
    rows: int | None = None

    @classmethod
    def parse(cls, text: str) -> Layout:
        if text == "auto":
            return cls()
        kind, colon, rows = text.partition(":")
        if kind == "blocks" and not colon:
            return cls(fixed=True)
        if kind == "blocks" and rows.isdigit() and 1 <= int(rows) <= MAX_BLOCK_ROWS:
            return cls(fixed=True, rows=int(rows))
        raise ValueError(f"layout {text!r}: expected auto, blocks or blocks:R with R from 1 to {MAX_BLOCK_ROWS}")

    def __str__(self) -> str:
        if not self.fixed:
            return "auto"
        return "blocks" if self.rows is None else f"blocks:{self.rows}"


AUTO = Layout()


@dataclass(frozen=True)
class Numerics:
    """`batch_invariant`: every decode step is padded (`layout.StepLayout`) and every codec matrix
    product runs in tiles of `codec_tile` rows (or, where verified, of `codec_tall_tile` rows), so
    a request's logits, codes and PCM do not depend on its neighbours. Off: unpadded shapes and
    plain kernels (faster; a row's last bits then follow the batch).

    `probe`: use the cheaper shapes a probe of this platform verifies (one decode block for the
    whole batch, prompts sharing a prefill forward, taller codec tiles); off, only the fixed
    shapes (the reference policy). `pad_unit`: the coarsest padding unit tried for those shapes.
    `layout`: `--layout` (`Layout`)."""

    batch_invariant: bool = True
    engine_block: int = ENGINE_BLOCK
    codec_tile: int = CODEC_TILE
    codec_tall_tile: int = CODEC_TALL_TILE
    probe: bool = True
    pad_unit: int = PAD_UNIT
    # Prompts admitted together are prefilled in one forward of up to this many rows: in fast mode
    # always, in batch-invariant mode where the probe verifies it (layout.prefill_layout),
    # else one prompt per forward.
    prefill_rows: int = PREFILL_ROWS
    layout: Layout = AUTO

    def __post_init__(self) -> None:
        if min(self.engine_block, self.codec_tile, self.pad_unit, self.prefill_rows) < 1:
            raise ValueError("engine_block, pad_unit, codec_tile and prefill_rows must be at least 1")
        if self.codec_tall_tile < self.codec_tile or self.codec_tall_tile % self.codec_tile:
            raise ValueError("codec_tall_tile must be a multiple of codec_tile")

    @property
    def codec_rows(self) -> int | None:
        """Rows per codec GEMM tile, or None for the plain kernels."""
        return self.codec_tile if self.batch_invariant else None


INVARIANT = Numerics()
FAST = Numerics(batch_invariant=False)
