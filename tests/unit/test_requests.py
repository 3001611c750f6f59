"""Request files: JSONL, CSV and TXT parsing and validation."""

import json
import tracemalloc
from pathlib import Path

import pytest

from moss_cli.config.request_fields import LANGUAGES, MAX_FRAMES_LIMIT
from moss_cli.config.requests import (
    MAX_PROBLEMS,
    RequestFileError,
    iter_requests,
    max_line_bytes_for,
    read_requests,
)
from moss_cli.errors import MossError
from moss_cli.io.reference_audio import ReferenceError, read_reference

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_shipped_examples_parse():
    jsonl = read_requests(EXAMPLES / "requests.jsonl")
    assert [r.id for r in jsonl][:3] == ["greeting", "weather", "seed-zero"]
    assert jsonl[2].seed == 0 and jsonl[0].seed is None
    assert {r.id: r.sampling for r in jsonl}["calm"] == {"audio_temperature": 1.2, "audio_top_k": 20}
    csv = read_requests(EXAMPLES / "requests.csv")
    assert [(r.id, r.seed, r.max_new_frames) for r in csv] == [
        ("csv-1", None, 30),
        ("csv-2", 123, 30),
        ("csv-3", None, 20),
    ]
    assert csv[1].text == "A second line, with a comma and an explicit seed."
    txt = read_requests(EXAMPLES / "lines.txt")
    assert [r.id for r in txt] == ["lines-00001", "lines-00002", "lines-00003"]


def test_all_problems_are_reported_together_with_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"text": "fine"}\n{"txt": "typo"}\n{"text": "x", "seed": true}\nnot json\n'
        '{"text": "y", "id": "../escape"}\n{"text": "z", "top_p": 0}\n'
    )
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


@pytest.mark.parametrize(
    "suffix, body, first, second",
    [
        (".jsonl", '{"id": "a", "text": "one"}\r\n\r\n{"id": "b", "text": "two", "seed": "x"}\r\n', 1, 3),
        (".csv", "id,text,seed\r\na,one,\r\n\r\nb,two,x\r\n", 2, 4),
    ],
)
def test_a_byte_order_mark_and_crlf_line_ends_are_accepted_and_lines_still_counted(
    tmp_path, suffix, body, first, second
):
    path = tmp_path / f"excel{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    with pytest.raises(RequestFileError) as err:
        read_requests(path)
    assert [(p.line, p.field) for p in err.value.problems] == [(second, "seed")]  # the bad seed, nothing else
    path.write_bytes(b"\xef\xbb\xbf" + body.replace('"x"', "1").replace(",x", ",1").encode())
    assert [(r.id, r.line, r.text) for r in read_requests(path)] == [("a", first, "one"), ("b", second, "two")]


def test_a_text_file_with_bom_and_crlf_gives_clean_texts(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(b"\xef\xbb\xbfFirst line.\r\n\r\nThird line.\r\n")
    assert [(r.id, r.text) for r in read_requests(path)] == [
        ("lines-00001", "First line."),
        ("lines-00003", "Third line."),
    ]


def test_a_quoted_csv_field_over_several_lines_is_numbered_from_its_first_line(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text('id,text,seed\na,"two\nlines",1\nb,"also\ntwo lines",x\n')
    with pytest.raises(RequestFileError) as err:
        read_requests(path)
    assert [(p.line, p.field) for p in err.value.problems] == [(4, "seed")]  # lines 4-5


@pytest.mark.parametrize(
    "rows, message",
    [
        # Left open to the end: rows 3-5 would have become r2's text.
        (["r3,Three.", "r4,Four.", "r5,Five."], "the quote opened on this line is never closed"),
        # Closed by a later row's quote, which is then not followed by a comma or the line end.
        (["r3,Three.", 'r4,"Four."', "r5,Five."], "runs on to line 5, which is not valid there"),
        # Closed at a later row's end, with a column too many.
        (["r3,Three.", 'r4,Four",x', "r5,Five."], "expected 2 columns, got 3 (a quoted field runs from this line to"),
    ],
)
def test_a_csv_quote_left_open_is_an_error_at_the_line_it_opened(tmp_path, rows, message):
    path = tmp_path / "r.csv"
    path.write_text("\n".join(["id,text", "r1,One.", 'r2,"Opening quote never closed.', *rows]) + "\n")
    with pytest.raises(RequestFileError) as err:
        read_requests(path)
    assert [p.line for p in err.value.problems] == [3]
    assert message in err.value.problems[0].message


def test_a_csv_quote_closed_by_other_text_on_its_own_line_is_an_error(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text('id,text\nr1,"Quoted" and more\nr2,Two.\n')
    with pytest.raises(RequestFileError) as err:
        read_requests(path)
    assert [(p.line, p.message) for p in err.value.problems] == [(2, "malformed CSV: ',' expected after '\"'")]


def test_utf16_is_named_as_such(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text("hello\n", encoding="utf-16")
    with pytest.raises(RequestFileError, match="UTF-16"):
        read_requests(path)


def test_a_directory_where_a_request_file_is_expected_is_named_a_directory(tmp_path):
    folder = tmp_path / "requests.jsonl"
    folder.mkdir()
    with pytest.raises(MossError, match="is a directory, expected a request file") as err:
        read_requests(folder)
    assert "does not exist" not in str(err.value)


def test_a_reference_audio_directory_is_named_a_directory(tmp_path):
    with pytest.raises(ReferenceError, match="is a directory, expected an audio file"):
        read_reference(tmp_path, channels=1, rate=24_000)
    with pytest.raises(ReferenceError, match="cannot be read"):  # not an OSError traceback
        read_reference(tmp_path / ("x" * 5000), channels=1, rate=24_000)


def test_a_file_uri_reference_is_the_local_file_it_names(tmp_path):
    """What vllm-omni takes as file:// (and refuses without --allowed-local-media-path) moss reads here."""
    voice = tmp_path / "my voice.wav"
    uris = [f"file://{tmp_path}/my%20voice.wav", f"FILE://localhost{tmp_path}/my%20voice.wav"]
    path = tmp_path / "r.jsonl"
    rows = [{"id": f"r{i}", "text": "x", "ref_audio": uri} for i, uri in enumerate(uris)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert [r.ref_audio for r in read_requests(path)] == [voice, voice]
    path.write_text(json.dumps({"id": "r", "text": "x", "ref_audio": "file://host/voice.wav"}) + "\n")
    with pytest.raises(RequestFileError, match=r"host \(host\) names a file on another machine"):
        read_requests(path)


@pytest.mark.parametrize("frames, ok", [(0, False), (1, True), (MAX_FRAMES_LIMIT, True), (MAX_FRAMES_LIMIT + 1, False)])
def test_max_new_frames_is_at_least_one(tmp_path, frames, ok):
    path = tmp_path / "r.jsonl"
    path.write_text(f'{{"text": "x", "max_new_frames": {frames}}}\n')
    if ok:
        assert read_requests(path)[0].max_new_frames == frames
    else:
        with pytest.raises(RequestFileError, match=r"\[1, 1000000\]"):
            read_requests(path)


def test_ids_that_differ_only_in_case_are_rejected_naming_both_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "Alpha", "text": "one"}\n{"id": "beta", "text": "two"}\n{"id": "alpha", "text": "x"}\n')
    with pytest.raises(RequestFileError) as err:
        read_requests(path)
    [problem] = err.value.problems
    assert (problem.line, problem.field) == (3, "id")
    assert "'alpha'" in problem.message and "'Alpha'" in problem.message and "line 1" in problem.message


@pytest.mark.parametrize(
    "language",
    [
        "English",
        "english",
        "en",
        "EN",
        "zh",
        "Chinese",
        "yue",
        "Cantonese",
        "Persian (Farsi)",
        "fa",
        "en-US",
        "zh_CN",
        "Auto",
        " French ",
        "",
    ],
)
def test_known_languages_are_accepted_and_kept_as_written(tmp_path, language):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"text": "x", "language": language}) + "\n")
    assert read_requests(path)[0].prompt_fields["language"] == language  # the prompt gets the value as written


@pytest.mark.parametrize(
    "language, hint",
    [
        ("Englsh", "did you mean 'English'"),
        ("Frnech", "did you mean 'French'"),
        ("Persian", "did you mean 'Persian (Farsi)'"),
        ("farsi", "Persian (Farsi)"),
        ("Klingon", "Chinese (zh)"),
        ("xx-YY", "English (en)"),
    ],
)
def test_unknown_languages_are_rejected_with_a_suggestion(tmp_path, language, hint):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"text": "x", "language": language}) + "\n")
    with pytest.raises(RequestFileError) as err:
        read_requests(path)
    [problem] = err.value.problems
    assert problem.field == "language" and hint in problem.message


def test_the_shipped_language_codes_are_the_ones_documented():
    assert len(LANGUAGES) == 31 and len(set(LANGUAGES.values())) == 31
    assert LANGUAGES["English"] == "en" and LANGUAGES["Cantonese"] == "yue"


def test_a_line_over_max_line_bytes_is_rejected_without_parsing_and_the_rest_is_read(tmp_path):
    path = tmp_path / "r.jsonl"
    long_line = json.dumps({"id": "big", "text": "x" * 5000}) + "\n"
    path.write_text('{"id": "a", "text": "one"}\n' + long_line + '{"id": "c", "text": "three", "seed": "x"}\n')
    with pytest.raises(RequestFileError) as err:
        read_requests(path, max_line_bytes=1000)
    assert [(p.line, p.field) for p in err.value.problems] == [(2, None), (3, "seed")]
    assert err.value.problems[0].message.startswith(f"line is {len(long_line) - 1} bytes")
    assert [r.id for r in read_requests(_without_line(path, 3), max_line_bytes=len(long_line))] == ["a", "big"]


def _without_line(path, number):
    lines = path.read_text().splitlines(keepends=True)
    out = path.with_name("trimmed" + path.suffix)
    out.write_text("".join(line for i, line in enumerate(lines, start=1) if i != number))
    return out


@pytest.mark.parametrize("suffix, line", [(".txt", "y" * 3000), (".csv", "a," + "y" * 3000)])
def test_max_line_bytes_holds_for_text_and_csv_files(tmp_path, suffix, line):
    path = tmp_path / f"r{suffix}"
    header = "id,text\n" if suffix == ".csv" else ""
    path.write_text(header + line + "\n" + ("b,short" if suffix == ".csv" else "short") + "\n")
    with pytest.raises(RequestFileError) as err:
        read_requests(path, max_line_bytes=1000)
    assert [(p.line, p.message.split(",")[0]) for p in err.value.problems] == [
        (2 if suffix == ".csv" else 1, f"line is {len(line)} bytes")
    ]


def test_iter_requests_streams_a_file_keeping_only_the_ids(tmp_path):
    path = tmp_path / "many.jsonl"
    count = 20_000
    with path.open("w") as handle:
        for i in range(count):
            handle.write(json.dumps({"id": f"r{i}", "text": "a sentence of text " * 20}) + "\n")
        handle.write('{"id": "r5", "text": "again"}\n')
    problems = []
    tracemalloc.start()
    try:
        seen = sum(1 for _ in iter_requests(path, problems))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen == count
    assert [(p.line, p.field) for p in problems] == [(count + 1, "id")]
    assert peak < path.stat().st_size / 2  # the file (8 MB) is never held whole


def test_iter_requests_reports_file_level_errors_at_once(tmp_path):
    with pytest.raises(MossError, match="does not exist"):
        iter_requests(tmp_path / "nowhere.jsonl", [])
    (tmp_path / "r.xml").write_text("<x/>")
    with pytest.raises(MossError, match="unsupported request file type"):
        iter_requests(tmp_path / "r.xml", [])


def test_a_file_of_nothing_but_errors_stops_after_a_bounded_number_of_problems(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("not json\n" * (MAX_PROBLEMS + 500))
    with pytest.raises(RequestFileError) as err:
        read_requests(path)
    assert len(err.value.problems) == MAX_PROBLEMS + 1
    assert "stopped reading" in err.value.problems[-1].message


def test_max_line_bytes_for_covers_a_prompt_that_fits(tmp_path):
    bound = max_line_bytes_for(max_model_len=100, token_bytes=4)
    # 100 tokens of at most 4 bytes each, every byte written as a 6-byte JSON escape, still fits.
    worst = json.dumps({"id": "a" * 128, "text": "\x01" * 400, "seed": -(2**63), "ref_audio": "v" * 4096})
    assert len(worst.encode()) <= bound
