"""Request files: JSONL (one object per line), CSV (same columns) or plain text (one utterance per
line). The whole file is parsed and checked before any model loads; every problem is reported
together, each with its file, line and field.
"""

from __future__ import annotations

import csv
import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MossError

PROMPT_FIELDS = ("instruction", "tokens", "quality", "sound_event", "ambient_sound", "language")
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty")
FIELDS = ("id", "text", "seed", "max_new_frames", "ref_audio", "ref_text", *PROMPT_FIELDS, *SAMPLING_FIELDS)
MAX_FRAMES_LIMIT = 1_000_000  # beyond this a value is a typo, not a request
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RESERVED_IDS = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10)),
                "manifest"}


@dataclass(frozen=True)
class Request:
    id: str
    text: str
    line: int
    seed: int | None = None
    max_new_frames: int | None = None
    prompt_fields: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)  # per-request overrides of stage-0 defaults
    ref_audio: Path | None = None  # reference voice, resolved against the request file's folder
    ref_text: str | None = None  # its transcript: continuation mode


@dataclass
class Problem:
    line: int | None
    field: str | None
    message: str


class RequestFileError(MossError):
    """All problems of a request file, reported together."""

    def __init__(self, file: Path, problems: list[Problem]) -> None:
        self.problems = problems
        self.report = "\n".join(f"{file}" + (f":{p.line}" if p.line else "") + (f" [{p.field}]" if p.field else "")
                                + f": {p.message}" for p in problems)
        first = problems[0]
        super().__init__(first.message, file=file, line=first.line, field=first.field)

    def describe(self) -> str:  # every problem, one per line
        return self.report


def read_requests(path: str | Path) -> list[Request]:
    """Parse and validate a request file; raise RequestFileError listing every problem."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise MossError("request file does not exist", file=file)
    suffix = file.suffix.lower()
    problems: list[Problem] = []
    try:
        if suffix == ".jsonl":
            records = list(_jsonl_records(file, problems))
        elif suffix == ".csv":
            records = list(_csv_records(file, problems))
        elif suffix == ".txt":
            records = [(n, {"text": line}) for n, line in _text_lines(file) if line.strip()]
        else:
            raise MossError(f"unsupported request file type {suffix or '(none)'!r}; use .jsonl, .csv or .txt", file=file)
    except UnicodeDecodeError as e:
        raise MossError(f"not UTF-8 text ({e.reason} at byte {e.start})", file=file) from None
    requests = []
    seen: dict[str, int] = {}
    for line, record in records:
        request = _validate(record, line, file.stem, problems, file.parent)
        if request is None:
            continue
        if request.id in seen:
            problems.append(Problem(line, "id", f"duplicate id {request.id!r} (first used on line {seen[request.id]})"))
            continue
        seen[request.id] = line
        requests.append(request)
    if not records and not problems:
        problems.append(Problem(None, None, "no requests in the file"))
    if problems:
        raise RequestFileError(file, problems)
    return requests


def _text_lines(file: Path):
    with file.open(encoding="utf-8", newline="") as handle:
        for number, line in enumerate(handle, start=1):
            yield number, line.rstrip("\r\n")


def _jsonl_records(file: Path, problems: list[Problem]):
    for number, line in _text_lines(file):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(Problem(number, None, f"invalid JSON: {e.msg} (column {e.colno})"))
            continue
        if not isinstance(record, dict):
            problems.append(Problem(number, None, f"expected a JSON object, got {type(record).__name__}"))
            continue
        yield number, record


def _csv_records(file: Path, problems: list[Problem]):
    with file.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            problems.append(Problem(1, None, f"malformed CSV: {e}"))
            return
        header = [h.strip() for h in header]
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                problems.append(Problem(reader.line_num, None, f"malformed CSV: {e}"))
                return
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                problems.append(Problem(reader.line_num, None, f"expected {len(header)} columns, got {len(row)}"))
                continue
            # Empty cells mean "not given"; numbers are parsed by the same checks as JSON values.
            yield reader.line_num, {key: _csv_value(key, cell) for key, cell in zip(header, row) if cell.strip() != ""}


def _csv_value(key: str, cell: str) -> Any:
    if key in ("seed", "max_new_frames", "top_k", "tokens"):
        try:
            return int(cell)
        except ValueError:
            pass
    if key in ("temperature", "top_p", "repetition_penalty"):
        try:
            return float(cell)
        except ValueError:
            pass
    return cell


def _validate(record: dict, line: int, stem: str, problems: list[Problem], base: Path = Path(".")) -> Request | None:
    before = len(problems)

    def bad(field_name: str, message: str) -> None:
        problems.append(Problem(line, field_name, message))

    for key in record:
        if key not in FIELDS:
            hint = difflib.get_close_matches(str(key), FIELDS, n=1)
            bad(str(key), f"unknown field {key!r}" + (f"; did you mean {hint[0]!r}?" if hint else
                                                      f"; expected one of {', '.join(FIELDS)}"))
    text = record.get("text")
    if not isinstance(text, str):
        bad("text", "missing 'text'" if text is None else f"'text' must be a string, got {type(text).__name__}")
    elif not text.strip():
        bad("text", "'text' is empty")

    request_id = record.get("id", f"{stem}-{line:05d}")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        bad("id", f"'id' must be a string, got {type(request_id).__name__}")
    else:
        request_id = str(request_id)
        if not SAFE_ID.match(request_id) or request_id.lower().split(".")[0] in RESERVED_IDS:
            bad("id", f"id {request_id!r} is not a safe file name (letters, digits, '.', '_', '-'; "
                      "no path separators or '..'; at most 128 characters; not a reserved name)")
        elif ".." in request_id:
            bad("id", f"id {request_id!r} must not contain '..'")

    seed = record.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -2**63 <= seed < 2**63):
        bad("seed", f"'seed' must be an integer in the signed 64-bit range, got {seed!r}")
    frames = record.get("max_new_frames")
    if frames is not None and (isinstance(frames, bool) or not isinstance(frames, int)
                               or not 0 <= frames <= MAX_FRAMES_LIMIT):
        bad("max_new_frames", f"'max_new_frames' must be an integer in [0, {MAX_FRAMES_LIMIT}], got {frames!r}")

    sampling = {}
    for key in SAMPLING_FIELDS:
        value = record.get(key)
        if value is None:
            continue
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        if key == "temperature" and not (number and value >= 0):
            bad(key, f"'temperature' must be a number >= 0 (0 means greedy), got {value!r}")
        elif key == "top_p" and not (number and 0 < value <= 1):
            bad(key, f"'top_p' must be in (0, 1], got {value!r}")
        elif key == "top_k" and not (number and isinstance(value, int) and value >= 0):
            bad(key, f"'top_k' must be an integer >= 0 (0 disables it), got {value!r}")
        elif key == "repetition_penalty" and not (number and value > 0):
            bad(key, f"'repetition_penalty' must be a number > 0, got {value!r}")
        else:
            sampling[key] = value

    fields = {}
    for key in PROMPT_FIELDS:
        value = record.get(key)
        if value is None:
            continue
        if key == "tokens" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            bad(key, f"'tokens' (duration hint in tokens) must be a non-negative integer, got {value!r}")
        elif key != "tokens" and not isinstance(value, str):
            bad(key, f"'{key}' must be a string, got {type(value).__name__}")
        else:
            fields[key] = value
    ref_audio, ref_text = record.get("ref_audio"), record.get("ref_text")
    if ref_audio is not None and (not isinstance(ref_audio, str) or not ref_audio.strip()):
        bad("ref_audio", "'ref_audio' must be a path to an audio file")
    if ref_text is not None and not isinstance(ref_text, str):
        bad("ref_text", f"'ref_text' must be a string, got {type(ref_text).__name__}")
    elif ref_text is not None and ref_audio is None:
        bad("ref_text", "'ref_text' is the transcript of 'ref_audio', which is missing")

    if len(problems) > before:
        return None
    return Request(id=request_id, text=text, line=line, seed=seed, max_new_frames=frames,
                   prompt_fields=fields, sampling=sampling,
                   ref_audio=None if ref_audio is None else base / Path(ref_audio).expanduser(),
                   ref_text=ref_text if ref_text and ref_text.strip() else None)
