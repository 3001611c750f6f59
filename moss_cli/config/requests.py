"""Request files: JSONL (one object per line), CSV (same columns) or plain text (one utterance per
line), UTF-8 with or without a byte-order mark, LF or CRLF line ends. Every request is checked before
any model loads; every problem is reported together, each with its file, line and field.

Files are read line by line (`iter_requests`), so checking a file holds one line and the set of ids
seen, never the whole file; a line longer than `max_line_bytes` is reported without being parsed.
"""

from __future__ import annotations

import csv
import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import MossError

PROMPT_FIELDS = ("instruction", "tokens", "quality", "sound_event", "ambient_sound", "language")
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty")
FIELDS = ("id", "text", "seed", "max_new_frames", "ref_audio", "ref_text", *PROMPT_FIELDS, *SAMPLING_FIELDS)
MAX_FRAMES_LIMIT = 1_000_000  # beyond this a value is a typo, not a request
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RESERVED_IDS = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10)),
                "manifest"}
# A whole novel chapter is a few hundred kB; a line past this is a mistake (a file concatenated onto
# one line, a binary file renamed). Callers that know max_model_len pass a tighter bound
# (`max_line_bytes_for`).
DEFAULT_MAX_LINE_BYTES = 8 << 20
MAX_PROBLEMS = 1000  # a file with more is the wrong file; reading on only fills the screen
BOM = b"\xef\xbb\xbf"

# The languages MOSS-TTS(-Local) v1.5 was trained on, by name and ISO 639 code: the "Supported
# Languages" table of OpenMOSS/MOSS-TTS README.md (commit 58b20a0d5fcc6766658d50967a90a9d890009a46),
# the same names its clis/moss_tts_local_v1.5_app.py offers as language tags. The value reaches the
# prompt's "- Language:" line as written, neither mapped nor checked, in the reference processor
# (moss_tts_local_v1.5/processing_moss_tts.py) and in vllm-omni (vllm_omni/entrypoints/openai/
# tts_adapters/moss_tts.py, commit 0131cb5560450800b800e889fb849ea2c851bd3f); so it does here, and the
# check only catches typos. Names and codes pass in any case, regional tags by their code ("en-US"),
# and "Auto", which vllm-omni's speech API documents (protocol/audio.py; serving_speech.py at
# 01bc4171df2a6ee9799a6994eb61eb10b6931641 checks its `_TTS_LANGUAGES` for Qwen3-TTS only).
LANGUAGES = {
    "Chinese": "zh", "Cantonese": "yue", "English": "en", "Arabic": "ar", "Czech": "cs", "Danish": "da",
    "Dutch": "nl", "Finnish": "fi", "French": "fr", "German": "de", "Greek": "el", "Hebrew": "he",
    "Hindi": "hi", "Hungarian": "hu", "Italian": "it", "Japanese": "ja", "Korean": "ko", "Macedonian": "mk",
    "Malay": "ms", "Persian (Farsi)": "fa", "Polish": "pl", "Portuguese": "pt", "Romanian": "ro",
    "Russian": "ru", "Spanish": "es", "Swahili": "sw", "Swedish": "sv", "Tagalog": "tl", "Thai": "th",
    "Turkish": "tr", "Vietnamese": "vi",
}
_LANGUAGE_SPELLINGS = {v.lower(): v for v in (*LANGUAGES, *LANGUAGES.values(), "Auto")}
_LANGUAGE_CODES = {code.lower() for code in LANGUAGES.values()}


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
    problems: list[Problem] = []
    requests = list(iter_requests(path, problems, max_line_bytes=max_line_bytes))
    if not requests and not problems:
        problems.append(Problem(None, None, "no requests in the file"))
    if problems:
        raise RequestFileError(Path(path).expanduser(), problems)
    return requests


def iter_requests(path: str | Path, problems: list[Problem], *,
                  max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[Request]:
    """Yield the valid requests of a file one at a time, reading it line by line; append every
    problem (invalid lines, duplicate ids) to `problems`. Only the ids seen are kept, so a file
    larger than memory can be checked. Raises MossError at once when the file cannot be read at all.
    """
    file = Path(path).expanduser()
    try:
        if file.is_dir():
            raise MossError("is a directory, expected a request file (.jsonl, .csv or .txt)", file=file)
        if not file.is_file():
            raise MossError("request file does not exist", file=file)
    except OSError as e:  # a name too long for the file system
        raise MossError(f"request file cannot be read ({e.strerror})", file=file) from None
    readers = {".jsonl": _jsonl_records, ".csv": _csv_records, ".txt": _txt_records}
    suffix = file.suffix.lower()
    if suffix not in readers:
        raise MossError(f"unsupported request file type {suffix or '(none)'!r}; use .jsonl, .csv or .txt", file=file)
    return _validated(readers[suffix](file, problems, max_line_bytes), file, problems)


def _validated(records: Iterable[tuple[int, dict]], file: Path, problems: list[Problem]) -> Iterator[Request]:
    seen: dict[str, int] = {}
    by_folded: dict[str, str] = {}  # id.lower() -> the id first seen with it
    for line, record in records:
        request = _validate(record, line, file.stem, problems, file.parent)
        if request is not None:
            rid = request.id
            if rid in seen:
                problems.append(Problem(line, "id", f"duplicate id {rid!r} (first used on line {seen[rid]})"))
            elif rid.lower() in by_folded:
                # Alpha.wav and alpha.wav are one file on Windows and macOS file systems.
                other = by_folded[rid.lower()]
                problems.append(Problem(line, "id", f"id {rid!r} differs only in case from id {other!r} on line "
                                                    f"{seen[other]}: they name the same file on a case-insensitive "
                                                    "file system"))
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
                    problems.append(Problem(1, None, "not UTF-8 text: it starts with a UTF-16 byte-order mark; "
                                                     "save it as UTF-8"))
                    return
                raw = raw.removeprefix(BOM)
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                size = len(raw)
                while raw and not raw.endswith(b"\n"):  # skip the rest, a bounded chunk at a time
                    raw = handle.readline(1 << 20)
                    size += len(raw)
                size -= len(raw) - len(raw.rstrip(b"\r\n"))
                problems.append(Problem(number, None, f"line is {size} bytes, more than the {max_line_bytes} one "
                                                      "request may take (max_line_bytes); split it"))
                yield number, None
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                problems.append(Problem(number, None, f"not UTF-8 text ({e.reason} at byte {e.start} of the line); "
                                                      "save the file as UTF-8"))
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
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(Problem(number, None, f"invalid JSON: {e.msg} (column {e.colno})"))
            continue
        if not isinstance(record, dict):
            problems.append(Problem(number, None, f"expected a JSON object, got {type(record).__name__}"))
            continue
        yield number, record


def _csv_records(file: Path, problems: list[Problem], max_line_bytes: int):
    consumed = 0  # the last line the csv reader has taken

    def lines():
        nonlocal consumed
        for number, line in _lines(file, problems, max_line_bytes):
            consumed = number
            yield "\n" if line is None else line  # a skipped line reads as a blank one

    reader = csv.reader(lines())
    # A quoted field may span lines; the csv module caps a field at 128 Ki characters unless told
    # otherwise, which is below what a long utterance may need.
    previous_limit = csv.field_size_limit(max(max_line_bytes, csv.field_size_limit()))
    try:
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            problems.append(Problem(consumed, None, f"malformed CSV: {e}"))
            return
        header = [h.strip() for h in header]
        while True:
            start = consumed + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                problems.append(Problem(consumed, None, f"malformed CSV: {e}"))
                return
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                problems.append(Problem(start, None, f"expected {len(header)} columns, got {len(row)}"))
                continue
            # Empty cells mean "not given"; numbers are parsed by the same checks as JSON values.
            yield start, {key: _csv_value(key, cell) for key, cell in zip(header, row) if cell.strip() != ""}
    finally:
        csv.field_size_limit(previous_limit)


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
                               or not 1 <= frames <= MAX_FRAMES_LIMIT):  # 0 frames would be an empty file
        bad("max_new_frames", f"'max_new_frames' must be an integer in [1, {MAX_FRAMES_LIMIT}], got {frames!r}")

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
        elif key == "language" and (hint := _language_problem(value)):
            bad(key, hint)
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


def _language_problem(value: str) -> str | None:
    """Why `value` is not a language the model knows, or None. Blank means "not given"."""
    wanted = value.strip().lower()
    if not wanted or wanted in _LANGUAGE_SPELLINGS or re.split(r"[-_]", wanted)[0] in _LANGUAGE_CODES:
        return None
    # "Farsi" is part of "Persian (Farsi)": a word of a name beats a similar spelling.
    hint = [name for name in LANGUAGES if wanted in re.findall(r"\w+", name.lower())]
    hint = hint or [_LANGUAGE_SPELLINGS[h] for h in difflib.get_close_matches(wanted, _LANGUAGE_SPELLINGS, n=1)]
    if hint:
        return f"unknown language {value!r}; did you mean {hint[0]!r}?"
    return (f"unknown language {value!r}; expected a name or code the model was trained on: "
            + ", ".join(f"{name} ({code})" for name, code in LANGUAGES.items()))
