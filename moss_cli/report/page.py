"""The HTML report page: one self-contained file (inline style and script, no network) that opens
from the file system, with audio and plots as relative links to files beside it.

The page is built from a `PageView` (what to show, as plain text), so the audit (audit/page.py) and
`moss diff` (diff/page.py) share one renderer; every text is escaped here, because ids, texts and
paths come from users."""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from urllib.parse import quote

from ..io.atomic import write_text_atomic

# A failing audit of thousands of comparisons must not take minutes to draw: past this many
# diverging pairs the rest keep their audio players, and the page says how many were drawn.
MAX_PLOTTED_PAIRS = 20


@dataclass
class Link:
    text: str
    href: str  # relative to the page: a file beside it or an anchor ("#pair-1")


@dataclass
class Table:
    headers: list[str]
    rows: list[list]  # cells: str, int, float or Link
    classes: list[str] = field(default_factory=list)  # one per row (e.g. its status), may be empty
    sortable: bool = False


@dataclass
class Figure:
    """An image in a section (drawn beside the page before it is written)."""

    caption: str
    href: str  # relative to the page


@dataclass
class PairView:
    """One diverging pair: what differs, its two clips, and (once drawn) its plots."""

    anchor: str
    title: str
    status: str
    detail: str
    audio: list[tuple[str, str]]  # (label, path relative to the page), reference first
    metrics: list[tuple[str, str]]
    mark_s: float | None = None  # where the two part, in seconds
    mark_label: str = "first divergence"
    logits: Table | None = None
    logits_note: str = ""
    plots: list[tuple[str, str]] = field(default_factory=list)  # (caption, relative path)


@dataclass
class MatrixCell:
    status: str  # its colour: pass, fail, or any other verdict (a difference that is not a failure)
    text: str
    href: str  # its detail: a pair's anchor or a section of the page
    title: str = ""  # shown on hover: what the cell sums up


@dataclass
class Matrix:
    """The page's first view: a row per request, a column per composition, each cell coloured by
    its verdict and linking to its detail."""

    heading: str
    corner: str  # what the rows are
    columns: list[str]
    rows: list[tuple[str, list[MatrixCell | None]]]  # None: the request was not in that composition
    legend: list[tuple[str, str]]  # (status, what it means), for the statuses the cells show
    note: str = ""


@dataclass
class PageView:
    title: str
    passed: bool
    headline: str
    facts: list[tuple[str, str]]
    sections: list[tuple[str, list[Table | Figure | str]]]  # (heading, tables, figures and paragraphs side by side)
    comparisons: Table
    pairs: list[PairView]  # the first is shown at the top, after the matrix
    notes: list[str] = field(default_factory=list)  # warnings
    footer: str = ""
    plotted: int = 0
    matrix: Matrix | None = None
    pairs_note: str = ""  # what every pair's parts mean, said once, with the first pair


def level_text(level: str, min_snr_db) -> str:
    """A comparison level as a page shows it: waveform with the SNR it must reach."""
    return level + (f" (min SNR {min_snr_db} dB)" if level == "waveform" else "")


def verdict_view(
    doc: dict, tool: str, verdict: str, level: str, facts: list[tuple[str, str]], command: str | None, **parts
) -> PageView:
    """The page of a report's JSON document `doc`: titled with its tool and verdict, its facts between
    the verdict and level and the command that made it, a footer naming the tool, version and date;
    `parts`: the rest of the `PageView` (headline, sections, comparisons, pairs, notes)."""
    return PageView(
        title=f"{tool}: {verdict}",
        passed=bool(doc["summary"]["passed"]),
        facts=[("verdict", verdict), ("level", level), *facts, ("command", command or "(not recorded)")],
        footer=f"{doc.get('tool', tool)} {doc.get('version', '')}, {doc.get('created', '')}",
        **parts,
    )


def _href(path: str) -> str:
    return path if path.startswith("#") else quote(path)


def _cell(value) -> str:
    if isinstance(value, Link):
        return f'<a href="{escape(_href(value.href))}">{escape(value.text)}</a>'
    return escape("" if value is None else str(value))


def render_table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = []
    for i, row in enumerate(table.rows):
        cls = f' class="{escape(table.classes[i])}"' if i < len(table.classes) and table.classes[i] else ""
        cells = "".join(f"<td>{_cell(v)}</td>" for v in row)
        body.append(f"<tr{cls}>{cells}</tr>")
    sortable = ' class="sortable"' if table.sortable else ""
    return f"<table{sortable}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _block(item: Table | Figure | str) -> str:
    if isinstance(item, Table):
        return f"<div>{render_table(item)}</div>"
    if isinstance(item, Figure):
        src, caption = escape(_href(item.href)), escape(item.caption)
        return f'<figure><img src="{src}" alt="{caption}"><figcaption>{caption}</figcaption></figure>'
    return f"<p>{escape(item)}</p>"


def _pair(pair: PairView) -> str:
    players = "".join(
        f'<figure><figcaption>{escape(label)}</figcaption><audio controls preload="metadata" '
        f'src="{escape(_href(path))}"></audio><br><a href="{escape(_href(path))}">{escape(path)}</a></figure>'
        for label, path in pair.audio
    )
    metrics = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in pair.metrics)
    plots = "".join(
        f'<figure><img src="{escape(_href(path))}" alt="{escape(caption)}"><figcaption>{escape(caption)}'
        "</figcaption></figure>"
        for caption, path in pair.plots
    )
    logits = ""
    if pair.logits is not None:
        note = escape(pair.logits_note)
        logits = f"<h4>Top logits at the diverging draw</h4><p>{note}</p>{render_table(pair.logits)}"
    return (
        f'<article class="pair {escape(pair.status)}" id="{escape(pair.anchor)}"><h3>{escape(pair.title)}</h3>'
        f'<p>{escape(pair.detail)}</p><div class="players">{players}</div><div class="plots">{plots}</div>'
        f"<dl>{metrics}</dl>{logits}</article>"
    )


def render_matrix(matrix: Matrix) -> str:
    legend = " ".join(f'<span class="m {escape(s)}">{escape(s)}</span> {escape(what)}' for s, what in matrix.legend)
    head = f"<th>{escape(matrix.corner)}</th>" + "".join(f"<th>{escape(c)}</th>" for c in matrix.columns)
    body = []
    for label, cells in matrix.rows:
        tds = "".join(
            '<td class="m absent">-</td>'
            if cell is None
            else f'<td class="m {escape(cell.status)}" title="{escape(cell.title)}">'
            f'<a href="{escape(_href(cell.href))}">{escape(cell.text)}</a></td>'
            for cell in cells
        )
        body.append(f"<tr><th>{escape(label)}</th>{tds}</tr>")
    return (
        f'<section id="matrix" data-measure=""><h2>{escape(matrix.heading)}</h2><p class="legend">{legend}</p>'
        f'<div class="wide"><table class="matrix"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
        "</table></div>"
        f"<p>{escape(matrix.note)}</p></section>"
    )


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 40px;color:#1d1d1f}
header{padding:12px 16px;margin:16px 0;border-radius:6px}header.pass{background:#e3f5e1}header.fail{background:#fbe3e1}
h1{margin:0;font-size:22px}table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #ccc;padding:3px 7px;
text-align:left;vertical-align:top;font-variant-numeric:tabular-nums}
th{background:#f1f1f1}.sortable th{cursor:pointer}tr.fail td{background:#fdeeed}tr.unseeded td{background:#fff7e0}
.side{display:flex;gap:24px;flex-wrap:wrap;align-items:flex-start}dl{display:grid;grid-template-columns:max-content
auto;gap:2px 12px}dt{font-weight:600}dd{margin:0;overflow-wrap:anywhere}.pair{border-top:2px solid #ddd;
padding-top:8px;margin-top:18px}.players,.plots{display:flex;gap:16px;flex-wrap:wrap}figure{margin:4px 0}
img{max-width:100%;border:1px solid #ddd}code{overflow-wrap:anywhere}.notes li{color:#8a5300}
.m{background:#ffe9a8}.m.pass{background:#cdeccb}.m.fail{background:#f6c4bf}.m.absent{background:#f1f1f1;color:#777}
span.m{padding:1px 7px;border:1px solid #bbb;border-radius:3px}.wide{overflow-x:auto}
.side>div{min-width:0;max-width:100%;overflow-x:auto}
table.matrix{font-size:12px}table.matrix th,table.matrix td{padding:2px 5px}table.matrix td{text-align:center}
table.matrix td a{color:inherit}
"""

# First in <head>: counts errors (scripts, and resources such as images, in the capture phase) and,
# once loaded, marks each image as loaded or broken and each element with data-measure with where it
# lies on the page ("top bottom", in CSS pixels), and the page with its width and the window's
# ("scroll client": a page wider than its window scrolls sideways); a browser test reads these marks.
WATCH = """(function(){var n=0,d=document.documentElement;window.addEventListener('error',function(){n+=1;
d.setAttribute('data-errors',String(n));},true);window.addEventListener('load',function(){var ok=0,all=0;
document.querySelectorAll('img').forEach(function(i){all+=1;var good=i.complete&&i.naturalWidth>0;
i.setAttribute('data-loaded',good?'yes':'no');if(good){ok+=1;}});d.setAttribute('data-images',ok+'/'+all);
document.querySelectorAll('[data-measure]').forEach(function(e){var r=e.getBoundingClientRect();
e.setAttribute('data-measure',Math.round(r.top+window.scrollY)+' '+Math.round(r.bottom+window.scrollY));});
d.setAttribute('data-width',d.scrollWidth+' '+d.clientWidth);});})();"""

# Click a column heading of the comparisons table to sort by it (numbers as numbers, "inf" last).
SORT = """document.querySelectorAll('table.sortable th').forEach(function(th,col){th.addEventListener('click',
function(){var body=th.closest('table').tBodies[0],up=th.getAttribute('data-up')!=='1';
th.setAttribute('data-up',up?'1':'0');var key=function(r){var t=r.cells[col].textContent,
v=t==='inf'?Infinity:Number(t);return t===''||isNaN(v)?[1,t]:[0,v];};
Array.prototype.slice.call(body.rows).sort(function(a,b){var x=key(a),y=key(b);
var d=x[0]-y[0]||(x[1]<y[1]?-1:x[1]>y[1]?1:0);return up?d:-d;}).forEach(function(r){body.appendChild(r);});});});"""


def render(view: PageView) -> str:
    facts = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in view.facts)
    sections = "".join(
        f'<section><h2>{escape(heading)}</h2><div class="side">{"".join(_block(b) for b in blocks)}</div></section>'
        for heading, blocks in view.sections
    )
    notes = ""
    if view.notes:
        notes = f'<section><h2>Warnings ({len(view.notes)})</h2><ul class="notes">'
        notes += "".join(f"<li>{escape(n)}</li>" for n in view.notes) + "</ul></section>"
    drawn = (
        f"Plots drawn for {view.plotted} of {len(view.pairs)} diverging pair(s)"
        + (f" (at most {MAX_PLOTTED_PAIRS}, earliest divergence first)" if view.plotted < len(view.pairs) else "")
        + "."
        if view.pairs
        else "No diverging pairs: no plots drawn."
    )
    status = "pass" if view.passed else "fail"
    first = ""
    if view.pairs:  # the earliest divergence, right below the matrix: what a reader looks at first
        note = f"<p>{escape(view.pairs_note)}</p>" if view.pairs_note else ""
        first = f'<section id="first" data-measure=""><h2>First divergence</h2>{note}{_pair(view.pairs[0])}</section>'
    rest = (
        f"<p>{escape(drawn)} The first is shown at the top.</p>{''.join(_pair(p) for p in view.pairs[1:])}"
        if view.pairs
        else f"<p>{escape(drawn)}</p>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(view.title)}</title><style>{STYLE}</style><script>{WATCH}</script></head><body>"
        f'<header class="{status}"><h1>{escape(view.title)}</h1><p>{escape(view.headline)}</p></header>'
        f"{render_matrix(view.matrix) if view.matrix else ''}{first}"
        f'<section id="summary"><h2>Summary</h2><dl>{facts}</dl><p id="plotted">{escape(drawn)}</p></section>'
        f"{sections}{notes}"
        f'<section id="comparisons"><h2>Comparisons ({len(view.comparisons.rows)})</h2>'
        f"<p>Failures first; click a heading to sort.</p>{render_table(view.comparisons)}</section>"
        f'<section id="pairs"><h2>Diverging pairs ({len(view.pairs)})</h2>{rest}</section>'
        f"<footer><p>{escape(view.footer)}</p></footer><script>{SORT}</script></body></html>\n"
    )


def write_page(folder: Path, view: PageView, max_plots: int = MAX_PLOTTED_PAIRS) -> Path:
    """Draw the plots of the first `max_plots` pairs whose audio is in `folder`, then write
    `folder/index.html`. Returns the page's path."""
    drawable = [p for p in view.pairs if len(p.audio) == 2 and all((folder / a).is_file() for _, a in p.audio)]
    if drawable[:max_plots]:
        from .plots import draw_pair  # matplotlib loads only when there is something to draw

        for n, pair in enumerate(drawable[:max_plots], start=1):
            try:
                pair.plots = draw_pair(folder, pair, f"plots/pair-{n}")
            except (ValueError, RuntimeError, OSError, MemoryError) as e:  # a figure must not cost the reports
                pair.detail += f" (its plots could not be drawn: {type(e).__name__}: {e})"
    view.plotted = sum(1 for p in view.pairs if p.plots)
    page = folder / "index.html"
    write_text_atomic(page, render(view))
    return page
