"""A real browser opens the report: headless Chromium loads index.html of a failing audit from the
file system, runs its scripts, loads its images, and the DOM it renders is checked; a screenshot is
saved into the report folder for a person to look at (`scripts/setup.sh --tests` installs Debian's `chromium`)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from page import is_png, parse_page
from typer.testing import CliRunner

from moss_cli.cli.app import app

CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))),
    "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None,
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not found (Debian package `chromium`; setup.sh --tests installs it)"
)
TIMEOUT_S = 90  # a cold start on a busy 2-core machine takes a few seconds; a hung browser must not hang CI


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # CI containers run as root, where Chromium's sandbox refuses to start
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",  # its own profile: parallel runs do not share a lock
        "--enable-logging=stderr",  # console messages of the page go to stderr ("CONSOLE")
        "--v=0",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


@pytest.mark.slow
def test_headless_chromium_renders_the_report_of_a_failing_audit(tmp_path):
    requests = tmp_path / "r.jsonl"
    rows = [
        {"id": "one", "text": "A first request for the browser.", "seed": 1, "max_new_frames": 10},
        {"id": "two", "text": "And a second one.", "seed": 2, "max_new_frames": 10},
    ]
    requests.write_text("".join(json.dumps(row) + "\n" for row in rows))
    rep = tmp_path / "rep"
    args = [str(requests), "--legacy-global-rng", "--scenarios", "batched", "--report-dir", str(rep)]
    audit = CliRunner().invoke(app, ["audit-determinism", *args])
    assert audit.exit_code == 1, audit.output
    failures = json.loads((rep / "audit.json").read_text())["summary"]["failures"]
    assert failures > 0
    url = (rep / "index.html").resolve().as_uri()

    # The DOM after load, in a 1400 x 1000 window: the page's own script marks every image loaded or
    # not, counts errors, and marks where the matrix and the first pair lie.
    window = "--window-size=1400,1000"
    shown = _chromium(tmp_path / "profile", window, "--virtual-time-budget=10000", "--dump-dom", url)
    assert shown.returncode == 0, shown.stderr[-2000:]
    dumped = tmp_path / "dom.html"  # checked well-formed like the file itself
    dom = shown.stdout
    dumped.write_text(dom if dom.startswith("<!DOCTYPE html>") else "<!DOCTYPE html>\n" + dom)
    page = parse_page(dumped)
    root = page.all("html")[0]
    images = page.all("img")
    assert len(images) == 2 * failures
    assert root.get("data-images") == f"{len(images)}/{len(images)}"
    assert all(img.get("data-loaded") == "yes" for img in images)
    assert "data-errors" not in root  # no script error, no resource that failed to load
    assert [a.get("class") for a in page.all("tr") if a.get("class") == "fail"] == ["fail"] * failures
    assert len(page.all("audio")) == 2 * failures
    console = [line for line in shown.stderr.splitlines() if "CONSOLE" in line]
    assert not console, console
    # The request x scenario matrix is on the first screen, whole; the first pair starts below it.
    placed = {a["id"]: [int(v) for v in a["data-measure"].split()] for a in page.all("section") if "data-measure" in a}
    top, bottom = placed["matrix"]
    assert 0 < top < bottom < 1000, placed
    assert placed["matrix"][1] <= placed["first"][0] < 1000, placed

    shot = rep / "screenshot.png"  # the first screen, as a person opening the report sees it
    taken = _chromium(tmp_path / "profile", window, f"--screenshot={shot}", url)
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert is_png(shot) and shot.stat().st_size > 20_000  # a rendered page, not a blank one


@pytest.mark.slow
def test_the_bench_page_of_a_wide_sweep_never_scrolls_sideways_at_1400_px(tmp_path):
    """Every arm at four concurrency levels: the cost table is wider than the page, and scrolls in its own
    box; the page itself is no wider than the window (the page marks both widths once loaded)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from speech_servers import Behaviour, serving

    rep = tmp_path / "rep"
    deploy = Path(__file__).resolve().parents[2] / "recipes" / "moss_tts_local_v1.5.yaml"
    args = ["--concurrency", "1,2,4,8", "--num-requests", "8", "--arms", "unseeded,seeded,deploy-seed"]
    with serving(Behaviour(moss_headers=True, batch_dependent=True)) as url:
        bench = CliRunner().invoke(
            app,
            ["bench", "--server", url, *args, "--deploy", str(deploy), "--level", "waveform", "--report-dir", str(rep)],
        )
    assert bench.exit_code == 1, bench.output  # the double's seeded responses vary under load
    url = (rep / "index.html").resolve().as_uri()
    shown = _chromium(tmp_path / "profile", "--window-size=1400,1000", "--virtual-time-budget=10000", "--dump-dom", url)
    assert shown.returncode == 0, shown.stderr[-2000:]
    dumped = tmp_path / "dom.html"
    dumped.write_text(
        shown.stdout if shown.stdout.startswith("<!DOCTYPE html>") else "<!DOCTYPE html>\n" + shown.stdout
    )
    scroll, client = map(int, parse_page(dumped).all("html")[0]["data-width"].split())
    assert client == 1400 and scroll <= client, (scroll, client)
