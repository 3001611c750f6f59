"""The fixed shapes batch-invariant products run in: row tiles (the codec's products) and key
blocks (the decode attention's sums). At a fixed row count a product gives a row the same bits
however many real rows come with it; which tiles a codec uses is chosen in `layout.codec_tiles`."""

from __future__ import annotations

from dataclasses import dataclass

# Keys per block of the decode attention's sums (attention.py: decode_attention). Any fixed size
# keeps a row's numbers independent of its neighbours; 64 keeps the keys gathered per step close to
# the real lengths, and the loop that adds up the blocks' sums is cheap.
KEY_BLOCK = 64


@dataclass(frozen=True)
class RowTiles:
    """Matrix products in fixed tiles of `rows` rows. The last, partial tile is padded to a
    multiple of `unit` rows up to `coarse` rows (default: `rows`), and to a multiple of `coarse`
    beyond. `whole(rows)` pads it to a full tile (right on any platform); smaller units and taller
    tiles only where this platform was measured to give a row the same bits at each such row
    count as in a full tile (`layout.codec_tiles`): that saves most of the padding of a short
    input and lets a long one read each weight fewer times."""

    rows: int
    unit: int
    coarse: int | None = None

    def __post_init__(self) -> None:
        if self.coarse is None:
            object.__setattr__(self, "coarse", self.rows)  # so equal tiles compare equal
        coarse = self.coarse
        if not (1 <= self.unit <= coarse <= self.rows and coarse % self.unit == 0 and self.rows % coarse == 0):
            raise ValueError("tiles need 1 <= unit <= coarse <= rows, unit dividing coarse and coarse dividing rows")

    @classmethod
    def whole(cls, rows: int) -> RowTiles:
        return cls(rows, rows)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Every row count a product may have."""
        step = self.coarse
        return (*range(self.unit, step, self.unit), *range(step, self.rows + 1, step))

    def padded(self, rows: int) -> int:
        """The row count a last tile of `rows` (at most `self.rows`) rows is padded to."""
        step = self.unit if rows <= self.coarse else self.coarse
        return -(-rows // step) * step

    def __str__(self) -> str:
        if self.unit == self.rows:
            return f"{self.rows} rows, the last padded whole"
        if self.coarse == self.rows:
            return f"{self.rows} rows, the last padded to {self.unit}"
        return f"{self.rows} rows, the last padded to {self.unit} up to {self.coarse}, to {self.coarse} beyond"
