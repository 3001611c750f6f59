"""The one rule for the commands' terminal tables (report/terminal.py): at any width no cell is cut
short or broken inside a word or a number; a table where every column's longest word fits, else one
block of `header: value` lines per row."""

import io

import pytest
from cli_runs import Drawn, assert_tables_whole  # tests/ is on sys.path
from rich.console import Console

from moss_cli.report.terminal import print_table

HEADERS = ["key", "value", "from", "drives in vllm-omni"]
ROWS = [
    ["connectors.shm.extra.initial_codec_chunk_frames", "1234567.891", "moss_cli/assets/deploy-tiny.yaml:19", "x"],
    ["max_num_seqs", "[green]8[/]", "recipes/moss_tts_local_v1.5.yaml:14", "requests batched at once, " * 4],
]


def _drawn(width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    print_table(console, HEADERS, ROWS, title="stage 0 of a deploy file with a long title", right=("value",))
    return console.file.getvalue()


@pytest.mark.parametrize("width", [40, 80, 120, 200, 400])
def test_no_cell_is_cut_or_broken_at_any_width(width):
    assert_tables_whole([Drawn([HEADERS, *ROWS], _drawn(width))], width)


def test_a_table_where_every_longest_word_fits_and_records_below_that():
    wide, middle, narrow = _drawn(400), _drawn(120), _drawn(80)
    assert "┃ key" in wide and len(max(wide.splitlines(), key=len)) < 400  # as wide as it needs, no wider
    # Every column's longest word fits in 120 columns: still a table, the prose wraps at its spaces.
    assert "┃ key" in middle and max(map(len, middle.splitlines())) == 120
    prose = ROWS[1][3].strip()
    assert prose in wide and prose not in middle and "│ once, requests │" in middle
    # 80 columns cannot hold the key, the value, the path and the prose's longest words side by side.
    assert "┃" not in narrow and "│" not in narrow
    assert "key: connectors.shm.extra.initial_codec_chunk_frames" in narrow and "value: 8" in narrow
    blocks = narrow.split("\n\n")
    assert len(blocks) == 2 and blocks[0].startswith("stage 0 of a deploy file") and "from: recipes/" in blocks[1]


def test_markup_in_cells_is_drawn_not_printed():
    assert "[green]" not in _drawn(200) and "[green]" not in _drawn(80)


def test_every_warning_line_is_drawn_by_one_function():
    """One style of warning for every command: `report.terminal.print_warning` draws them all."""
    from pathlib import Path

    import moss_cli

    root = Path(moss_cli.__file__).parent
    drawn = [p.relative_to(root) for p in root.rglob("*.py") if "warning:[/]" in p.read_text()]
    assert drawn == [Path("report/terminal.py")], drawn
