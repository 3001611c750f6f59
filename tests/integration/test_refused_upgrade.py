"""The audit and the bench against servers that do not answer the WebSocket upgrade as a WebSocket server
would (an HTTP/1.0 server's 404 page, a 426, a 400, a connection closed on the upgrade, a 101
without `Upgrade`, an HTTP/1.0 200 page): the default audit skips the WebSocket path with the reason
and audits every other path; naming the scenario makes its absence exit 2, with a report of what was
compared before. An audit whose server dies partway writes that partial report too, marked
incomplete in every format. `bench --path websocket` names the path's absence the same way."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from cli_runs import flat, moss, moss_audit  # tests/ is on sys.path
from speech_servers import UPGRADE_ANSWERS, http10_speech_server

PATHS_AUDITED = ("single", "sse", "raw-stream")  # what an HTTP/1.0 server with one route answers


def _audit(url: str, tmp_path: Path, *args):
    return moss_audit(
        *args,
        "--timeout",
        "20",
        f"--junit={tmp_path / 'junit.xml'}",
        f"--markdown={tmp_path / 'summary.md'}",
        server=url,
        stagger_ms=5,
        report=tmp_path / "audit.json",
        flat_output=True,
    )


@pytest.mark.slow  # every default scenario
def test_the_default_audit_of_an_http10_server_skips_the_websocket_path_and_audits_the_rest(tmp_path):
    with http10_speech_server() as url:
        code, report, output = _audit(url, tmp_path)
    assert code == 0, output
    paths = report["server"]["paths"]
    assert {name: paths[name]["verdict"] for name in PATHS_AUDITED} == dict.fromkeys(PATHS_AUDITED, "identical")
    websocket = paths["websocket"]
    assert websocket["verdict"] == "skipped" and websocket["passed"] is None
    assert "the WebSocket upgrade was answered 'HTTP/1.0 404" in websocket["detail"]
    assert "skipped websocket: the server does not serve the WebSocket stream" in output
    assert paths["batch"]["verdict"] == "skipped" and "the server has no batch route" in paths["batch"]["detail"]
    assert report["summary"]["incomplete"] is None and report["summary"]["exit_code"] == 0


@pytest.mark.parametrize("upgrade", [answer for answer in UPGRADE_ANSWERS if answer != "http/1.0 404"])
def test_every_unreadable_upgrade_skips_the_path_with_its_reason(upgrade, tmp_path):
    with http10_speech_server(upgrade) as url:
        code, report, output = _audit(url, tmp_path, "--scenarios", "repeat,concurrent,websocket")
    assert code == 2, output
    # The scenario was asked for by name: its absence is an error, with the reason, after the rest.
    assert "error: [--scenarios]: websocket, asked for by name: the server does not serve the WebSocket" in output
    reason = {
        "426": "HTTP 426 Upgrade Required to the WebSocket upgrade",
        "400": "HTTP 400 Bad Request to the WebSocket upgrade",
        "closed": "the connection was closed on the WebSocket upgrade",
        "101 without upgrade": "the WebSocket upgrade was not completed (InvalidUpgrade",
        "http/1.0 200 page": "the WebSocket upgrade was answered 'HTTP/1.0 200 OK'",
    }[upgrade]
    assert reason in output
    assert report["summary"]["incomplete"]["scenario"] == "websocket"
    assert report["server"]["paths"]["single"]["verdict"] == "identical"
    assert report["summary"]["scenarios"]["concurrent"] == {"pass": 8}


def test_without_the_scenario_named_the_same_server_is_audited_whole(tmp_path):
    with http10_speech_server("closed") as url:
        code, report, output = _audit(url, tmp_path, "--scenarios", "repeat,concurrent")
    assert code == 0, output
    assert report["server"]["paths"]["websocket"]["verdict"] == "not audited"


def test_an_audit_whose_server_dies_partway_writes_its_partial_report(tmp_path):
    # The reference (8), the repeat (8) and the concurrent run (8) are answered; the server dies in the next.
    with http10_speech_server(die_after=30) as url:
        code, report, output = _audit(url, tmp_path, "--scenarios", "repeat,concurrent,shuffled,length-mix")
    assert code == 2, output
    stopped = report["summary"]["incomplete"]
    assert stopped["scenario"] == "shuffled" and stopped["not_run"] == ["shuffled", "length-mix"]
    assert "connection lost" in stopped["error"]
    assert report["summary"]["exit_code"] == 2 and report["summary"]["passed"] is False
    assert report["summary"]["scenarios"] == {"repeat": {"pass": 8}, "concurrent": {"pass": 8}}
    assert "INCOMPLETE: the audit stopped in shuffled" in output
    assert "the reports hold the" in output and "audit.json" in output
    suite = next(s for s in ET.parse(tmp_path / "junit.xml").getroot() if s.get("name") == "audit.incomplete")
    error = suite.find("testcase/error")
    assert error is not None and "not run: shuffled, length-mix" in error.get("message")
    assert ET.parse(tmp_path / "junit.xml").getroot().get("errors") == "1"
    markdown = (tmp_path / "summary.md").read_text()
    assert "INCOMPLETE (stopped in shuffled)" in markdown and "**INCOMPLETE: the audit stopped in shuffled" in markdown
    assert report["server"]["paths"]["single"]["verdict"] == "identical"


@pytest.mark.parametrize("upgrade", ["http/1.0 404", "closed"])
def test_bench_on_the_websocket_path_names_its_absence(upgrade):
    with http10_speech_server(upgrade) as url:
        result = moss("bench", "--server", url, "--path", "websocket", "--timeout", "20", "--concurrency", "1")
    assert result.exit_code == 2, result.output
    said = flat(result.output)
    assert "[--path]: websocket: the server does not serve the WebSocket stream (/v1/audio/speech/stream)" in said
    assert "bench another path (--path single or raw-stream)" in said and "Traceback" not in said
