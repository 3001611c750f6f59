"""Request files: JSONL, CSV and TXT parsing and validation."""

from pathlib import Path

import pytest

from moss_cli.config.requests import RequestFileError, read_requests

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_shipped_examples_parse():
    jsonl = read_requests(EXAMPLES / "requests.jsonl")
    assert [r.id for r in jsonl][:3] == ["greeting", "weather", "seed-zero"]
    assert jsonl[2].seed == 0 and jsonl[0].seed is None
    assert {r.id: r.sampling for r in jsonl}["calm"] == {"temperature": 1.2, "top_k": 20}
    csv = read_requests(EXAMPLES / "requests.csv")
    assert [(r.id, r.seed, r.max_new_frames) for r in csv] == [("csv-1", None, 30), ("csv-2", 123, 30),
                                                               ("csv-3", None, 20)]
    assert csv[1].text == "A second line, with a comma and an explicit seed."
    txt = read_requests(EXAMPLES / "lines.txt")
    assert [r.id for r in txt] == ["lines-00001", "lines-00002", "lines-00003"]


def test_all_problems_are_reported_together_with_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n{"txt": "typo"}\n{"text": "x", "seed": true}\nnot json\n'
                    '{"text": "y", "id": "../escape"}\n{"text": "z", "top_p": 0}\n')
    with pytest.raises(RequestFileError) as err:
        read_requests(path)
    found = {(p.line, p.field) for p in err.value.problems}
    assert {(2, "txt"), (2, "text"), (3, "seed"), (4, None), (5, "id"), (6, "top_p")} <= found
    assert "did you mean 'text'" in err.value.describe()
    assert f"{path}:3 [seed]" in err.value.describe()


def test_duplicate_ids_are_rejected(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text('{"id": "a", "text": "one"}\n{"id": "a", "text": "two"}\n')
    with pytest.raises(RequestFileError, match="duplicate id 'a'"):
        read_requests(path)


def test_unsupported_file_type_is_an_error(tmp_path):
    path = tmp_path / "r.xml"
    path.write_text("<x/>")
    with pytest.raises(Exception, match="unsupported request file type"):
        read_requests(path)
