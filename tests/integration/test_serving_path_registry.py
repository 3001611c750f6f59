"""A serving path is one record (`remote.paths.ServingPath`): a path that only adds body fields, registered in
PATHS, is audited by its own scenario, shows in the path table of every report format, and is benched by
`--path`, with nothing else to change."""

from __future__ import annotations

from types import MappingProxyType
from xml.etree import ElementTree as ET

import pytest
from cli_runs import flat, moss, moss_audit, write_rows  # tests/ is on sys.path
from speech_servers import Behaviour, serving

from moss_cli.remote import paths

QUIET = paths.ServingPath(
    "quiet-stream",
    "POST /v1/audio/speech with quiet: true",
    paths.HTTP,
    "quiet-stream",
    "quiet answers",
    MappingProxyType({"quiet": True}),
    run="quiet-{concurrency}-at-once",
    answers=("quiet bodies", "bodies asked for quietly"),
)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(paths.PATHS, QUIET.name, QUIET)
    return QUIET


def test_a_registered_path_is_audited_and_reported_in_every_format(registered, tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "u", "text": "No seed.", "max_new_frames": 3}])
    behaviour = Behaviour(moss_headers=True)
    reports = [f"--junit={tmp_path / 'a.xml'}", f"--markdown={tmp_path / 'a.md'}", f"--report-dir={tmp_path / 'rep'}"]
    with serving(behaviour) as url:
        code, report, output = moss_audit(
            requests,
            "--scenarios",
            "repeat,quiet-stream",
            *reports,
            server=url,
            stagger_ms=5,
            report=tmp_path / "a.json",
        )
    assert code == 0, output
    assert report["server"]["paths"]["quiet-stream"]["verdict"] == "identical"
    assert "quiet-stream/quiet-8-at-once" in report["server"]["runs"]
    assert any(body.get("quiet") is True for body in behaviour.seen)  # it went as the path asks
    assert "quiet-stream" in flat(output) and "POST /v1/audio/speech with quiet: true" in flat(output)
    assert "| `quiet-stream` |" in (tmp_path / "a.md").read_text()
    suite = next(s for s in ET.parse(tmp_path / "a.xml").getroot() if s.get("name") == "audit.paths")
    assert "quiet-stream" in {case.get("name") for case in suite}
    assert "quiet-stream" in (tmp_path / "rep" / "index.html").read_text()


def test_a_registered_path_is_benched(registered, tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "u", "text": "No seed.", "seed": 3, "max_new_frames": 3}])
    behaviour = Behaviour(moss_headers=True)
    with serving(behaviour) as url:
        result = moss(
            "bench", "--server", url, "--path", "quiet-stream", "--concurrency", "1", "--requests", requests,
            "--json", tmp_path / "b.json",
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "quiet bodies" in flat(result.output)
    assert all(body.get("quiet") is True for body in behaviour.seen if body.get("input") == "No seed.")
