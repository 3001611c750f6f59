"""Request files: JSONL (one object per line), CSV (same columns) or plain text (one utterance per
line), UTF-8 with or without a byte-order mark, LF or CRLF line ends. Every request is checked before
any model loads; every problem is reported together, each with its file, line and field.

Files are read line by line (`iter_requests`), so checking a file holds one line and the set of ids
seen, never the whole file; a line longer than `max_line_bytes` is reported without being parsed.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import MossError
from .request_fields import (
    FIELDS,
    PROMPT_FIELDS,
    SAMPLING_FIELDS,
    Problem,
    Request,
    validate_record,
)

__all__ = [
    "Request",
    "Problem",
    "RequestFileError",
    "read_requests",
    "parse_requests",
    "iter_requests",
    "FIELDS",
    "PROMPT_FIELDS",
    "SAMPLING_FIELDS",
    "DEFAULT_MAX_LINE_BYTES",
    "max_line_bytes_for",
]

# A whole novel chapter is a few hundred kB; a line past this is a mistake (a file concatenated onto
# one line, a binary file renamed). Callers that know max_model_len pass a tighter bound
# (`max_line_bytes_for`).
DEFAULT_MAX_LINE_BYTES = 8 << 20
MAX_PROBLEMS = 1000  # a file with more is the wrong file; reading on only fills the screen
BOM = b"\xef\xbb\xbf"


class RequestFileError(MossError):
    """All problems of a request file, reported together."""

    def __init__(self, file: Path, problems: list[Problem]) -> None:
        self.problems = problems
        self.report = "\n".join(
            f"{file}" + (f":{p.line}" if p.line else "") + (f" [{p.field}]" if p.field else "") + f": {p.message}"
            for p in problems
        )
        first = problems[0]
        super().__init__(first.message, file=file, line=first.line, field=first.field)

    def describe(self) -> str:  # every problem, one per line
        return self.report


def max_line_bytes_for(max_model_len: int, token_bytes: int, slack: int = 64 << 10) -> int:
    """The longest request line that could still fit a prompt of `max_model_len` tokens when one
    token stands for at most `token_bytes` bytes of text (`model.prompt.max_token_bytes`).

    Every prompt field counts toward the same length, so the bound covers them together; a JSON
    string may spell one byte as a 6-byte escape (\\u0001), hence the factor 6; `slack` leaves room
    for the fields that are not part of the prompt (id, seed, paths, numbers).
    """
    return 6 * max_model_len * token_bytes + slack


def read_requests(path: str | Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> list[Request]:
    """Parse and validate a request file; raise RequestFileError listing every problem."""
    requests, problems = parse_requests(path, max_line_bytes=max_line_bytes)
    if problems:
        raise RequestFileError(Path(path).expanduser(), problems)
    return requests


def parse_requests(
    path: str | Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[list[Request], list[Problem]]:
    """The valid requests of a file and the problems of the others, for callers that check the
    valid ones further (reference audio, prompt lengths) and report every problem together."""
    problems: list[Problem] = []
    requests = list(iter_requests(path, problems, max_line_bytes=max_line_bytes))
    if not requests and not problems:
        problems.append(Problem(None, None, "no requests in the file"))
    return requests, problems


def iter_requests(
    path: str | Path, problems: list[Problem], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[Request]:
    """Yield the valid requests of a file one at a time, reading it line by line; append every
    problem (invalid lines, duplicate ids) to `problems`. Only the ids seen are kept, so a file
    larger than memory can be checked. Raises MossError at once when the file cannot be read at all.
    """
    file = Path(path).expanduser()
    try:
        if file.is_dir():
            raise MossError(f"is a directory, expected a request file ({KINDS})", file=file)
        if not file.is_file():
            raise MossError("request file does not exist", file=file)
    except OSError as e:  # a name too long for the file system
        raise MossError(f"request file cannot be read ({e.strerror})", file=file) from None
    suffix = file.suffix.lower()
    if suffix not in READERS:
        raise MossError(f"unsupported request file type {suffix or '(none)'!r}; use {KINDS}", file=file)
    return _validated(READERS[suffix](file, problems, max_line_bytes), file, problems)


def _validated(records: Iterable[tuple[int, dict]], file: Path, problems: list[Problem]) -> Iterator[Request]:
    seen: dict[str, int] = {}
    by_folded: dict[str, str] = {}  # id.lower() -> the id first seen with it
    for line, record in records:
        request = validate_record(record, line, file.stem, problems, file.parent)
        if request is not None:
            rid = request.id
            if rid in seen:
                problems.append(Problem(line, "id", f"duplicate id {rid!r} (first used on line {seen[rid]})"))
            elif rid.lower() in by_folded:
                # Alpha.wav and alpha.wav are one file on Windows and macOS file systems.
                other = by_folded[rid.lower()]
                problems.append(
                    Problem(
                        line,
                        "id",
                        f"id {rid!r} differs only in case from id {other!r} on line "
                        f"{seen[other]}: they name the same file on a case-insensitive "
                        "file system",
                    )
                )
            else:
                seen[rid] = line
                by_folded[rid.lower()] = rid
                yield request


def _lines(file: Path, problems: list[Problem], max_line_bytes: int) -> Iterator[tuple[int, str | None]]:
    """(line number, text with its line end) for each line; None for a line over `max_line_bytes`,
    which is reported and skipped without being held in memory. A UTF-8 byte-order mark is dropped;
    text that is not UTF-8 is reported and ends the reading, as do too many problems."""
    start = len(problems)
    try:
        handle = file.open("rb")
    except OSError as e:  # no read permission
        problems.append(Problem(None, None, f"cannot be read ({e.strerror})"))
        return
    with handle:
        number = 0
        while raw := handle.readline(max_line_bytes + 1):
            number += 1
            if len(problems) - start >= MAX_PROBLEMS:
                problems.append(Problem(number, None, f"stopped reading here, after {MAX_PROBLEMS} problems"))
                return
            if number == 1:
                if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
                    problems.append(
                        Problem(1, None, "not UTF-8 text: it starts with a UTF-16 byte-order mark; save it as UTF-8")
                    )
                    return
                raw = raw.removeprefix(BOM)
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                size = len(raw)
                while raw and not raw.endswith(b"\n"):  # skip the rest, a bounded chunk at a time
                    raw = handle.readline(1 << 20)
                    size += len(raw)
                size -= len(raw) - len(raw.rstrip(b"\r\n"))
                problems.append(
                    Problem(
                        number,
                        None,
                        f"line is {size} bytes, more than the {max_line_bytes} one "
                        "request may take (max_line_bytes); split it",
                    )
                )
                yield number, None
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                problems.append(
                    Problem(
                        number,
                        None,
                        f"not UTF-8 text ({e.reason} at byte {e.start} of the line); save the file as UTF-8",
                    )
                )
                return
            yield number, text


def _txt_records(file: Path, problems: list[Problem], max_line_bytes: int):
    for number, line in _lines(file, problems, max_line_bytes):
        if line is not None and line.strip():
            yield number, {"text": line.rstrip("\r\n")}


def _jsonl_records(file: Path, problems: list[Problem], max_line_bytes: int):
    for number, line in _lines(file, problems, max_line_bytes):
        if line is None or not line.strip():
            continue
        text = line.rstrip("\r\n")  # with its line end, an error at the end would be "column 1" of the next
        try:
            record = json.loads(text)
        except json.JSONDecodeError as e:
            problems.append(Problem(number, None, f"invalid JSON: {e.msg} (column {e.pos + 1})"))
            continue
        except RecursionError:
            problems.append(Problem(number, None, "invalid JSON: nested too deeply"))
            continue
        if not isinstance(record, dict):
            problems.append(Problem(number, None, f"expected a JSON object, got {type(record).__name__}"))
            continue
        yield number, record


def _meta_lst_records(file: Path, problems: list[Problem], max_line_bytes: int):
    """Seed-TTS-eval's test lists (its meta.lst), one utterance a line, fields separated by '|', as its
    get_wav_res_ref_text.py:11-21 reads them: `utt|prompt text|prompt wav|text` (4 fields; 5: a fifth, the
    reference's own wav, is not needed), `utt|text|prompt wav` (3; the utt may end in .wav) and
    `utt|text` (2: no voice to clone). A prompt wav is relative to the list's folder."""
    for number, line in _lines(file, problems, max_line_bytes):
        if line is None or not line.strip():
            continue
        fields = line.rstrip("\r\n").split("|")
        if len(fields) in (4, 5):
            utt, prompt_text, prompt_wav, text = fields[:4]
        elif len(fields) == 3:
            (utt, text, prompt_wav), prompt_text = fields, None
            utt = utt.removesuffix(".wav")
        elif len(fields) == 2:
            (utt, text), prompt_text, prompt_wav = fields, None, None
        else:
            problems.append(
                Problem(
                    number,
                    None,
                    f"expected 2 to 5 fields separated by '|' (Seed-TTS-eval's meta.lst: "
                    f"utt|prompt text|prompt wav|text), got {len(fields)}",
                )  # fmt: skip
            )
            continue
        record = {"id": utt.strip(), "text": text.strip()}
        if prompt_wav is not None and prompt_wav.strip():
            record["ref_audio"] = prompt_wav.strip()
        if prompt_text is not None and prompt_text.strip():
            record["ref_text"] = prompt_text.strip()
        yield number, record


def _csv_records(file: Path, problems: list[Problem], max_line_bytes: int):
    consumed = 0  # the last line the csv reader has taken

    def lines():
        nonlocal consumed
        for number, line in _lines(file, problems, max_line_bytes):
            consumed = number
            yield "\n" if line is None else line  # a skipped line reads as a blank one

    # Strict: a quote left open must not swallow the rows after it. Without it the csv module ends
    # an unclosed quoted field at the end of the file, and takes `"a"b` as `ab`.
    reader = csv.reader(lines(), strict=True)
    # A quoted field may span lines; the csv module caps a field at 128 Ki characters unless told
    # otherwise, which is below what a long utterance may need.
    previous_limit = csv.field_size_limit(max(max_line_bytes, csv.field_size_limit()))
    try:

        def next_row(start: int) -> list[str] | None:
            """The next record, or None at the end or at a malformed one (reported; reading stops)."""
            try:
                return next(reader)
            except StopIteration:
                return None
            except csv.Error as e:
                problems.append(_csv_error(file, max_line_bytes, start, consumed, e))
                return None

        header = next_row(1)
        if header is None:
            return
        header = [h.strip() for h in header]
        while True:
            start = consumed + 1
            row = next_row(start)
            if row is None:
                return
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                spans = f" (a quoted field runs from this line to line {consumed}: is a quote left open?)"
                spans = spans if consumed > start else ""
                problems.append(Problem(start, None, f"expected {len(header)} columns, got {len(row)}{spans}"))
                continue
            # Empty cells mean "not given"; numbers are parsed by the same checks as JSON values.
            yield start, {key: _csv_value(key, cell) for key, cell in zip(header, row) if cell.strip() != ""}
    finally:
        csv.field_size_limit(previous_limit)


READERS = {".jsonl": _jsonl_records, ".csv": _csv_records, ".txt": _txt_records, ".lst": _meta_lst_records}
KINDS = ".jsonl, .csv, .txt or .lst (Seed-TTS-eval's meta.lst)"


def _csv_error(file: Path, max_line_bytes: int, start: int, end: int, error: csv.Error) -> Problem:
    """The problem for a malformed CSV record on lines start..end, named at the line where the
    quoted field behind it opened when that field spans lines."""
    lines = (item for item in _lines(file, [], max_line_bytes) if start <= item[0] <= end)
    if str(error) == "unexpected end of data":  # the end of the file inside a quoted field
        opened = _open_quote_line(lines, end)
        return Problem(
            opened,
            None,
            f"malformed CSV: the quote opened on this line is never closed, so every line after it, to the "
            f'end of the file (line {end}), would be part of one field; close it (a quote inside a quoted field is "")',
        )
    opened = _open_quote_line(lines, end - 1)
    if opened is None:
        return Problem(end, None, f"malformed CSV: {error}")
    return Problem(
        opened,
        None,
        f"malformed CSV: the quoted field opened on this line runs on to line {end}, which is not valid "
        f"there ({error}); is its closing quote missing?",
    )


def _open_quote_line(lines: Iterable[tuple[int, str | None]], last: int) -> int | None:
    """The line on which the quoted field still open at the end of line `last` opened, or None."""
    opened, field_start = None, True
    for number, text in lines:
        if number > last:
            break
        text = text or "\n"
        i = 0
        while i < len(text):
            char = text[i]
            if opened is not None:
                if char == '"' and text.startswith('"', i + 1):
                    i += 1  # a doubled quote is a literal one
                elif char == '"':
                    opened = None
            elif char == '"' and field_start:
                opened = number
            field_start = opened is None and char in ",\r\n"
            i += 1
    return opened


def _csv_value(key: str, cell: str) -> Any:
    if key in ("seed", "max_new_frames", "audio_top_k", "tokens"):
        try:
            return int(cell)
        except ValueError:
            pass
    if key in ("audio_temperature", "audio_top_p", "audio_repetition_penalty"):
        try:
            return float(cell)
        except ValueError:
            pass
    return cell
