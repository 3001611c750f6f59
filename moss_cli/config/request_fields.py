"""One request record: its fields, what each may hold, and the checks that turn it into a
`Request` (or into problems, each with its line and field): `validate_record` reads a parsed JSON
object or CSV row, `make_request` applies moss's rules to its values, and to a body's (serve)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model.template import PROMPT_FIELDS
from ..validation import file_uri_path, is_int64, is_integer, is_number
from ..vllm_omni import AUDIO_SAMPLER_TEXT, OPENAI_SAMPLING

# A moss extension for local runs: overrides of the audio sampler, named for what they change (the
# OpenMOSS reference generate() arguments). vllm-omni has no such fields (vllm_omni.OPENAI_SAMPLING).
# Each one's rule: what a value must be (it is a number first), said as the error says it.
SAMPLING_RULES = {
    "audio_temperature": (lambda v: v >= 0, "a number >= 0 (0 means greedy)"),
    "audio_top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "audio_top_k": (lambda v: isinstance(v, int) and v >= 0, "an integer >= 0 (0 disables it)"),
    "audio_repetition_penalty": (lambda v: v > 0, "a number > 0"),
}
SAMPLING_FIELDS = tuple(SAMPLING_RULES)
FIELDS = ("id", "text", "seed", "max_new_frames", "ref_audio", "ref_text", *PROMPT_FIELDS, *SAMPLING_FIELDS)
MAX_FRAMES_LIMIT = 1_000_000  # beyond this a value is a typo, not a request
URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://|data:)")  # a scheme and authority, or a data: URI
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RESERVED_IDS = {
    "con",
    "prn",
    "aux",
    "nul",
    *(f"com{i}" for i in range(1, 10)),
    *(f"lpt{i}" for i in range(1, 10)),
    "manifest",
}

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
    "Chinese": "zh",
    "Cantonese": "yue",
    "English": "en",
    "Arabic": "ar",
    "Czech": "cs",
    "Danish": "da",
    "Dutch": "nl",
    "Finnish": "fi",
    "French": "fr",
    "German": "de",
    "Greek": "el",
    "Hebrew": "he",
    "Hindi": "hi",
    "Hungarian": "hu",
    "Italian": "it",
    "Japanese": "ja",
    "Korean": "ko",
    "Macedonian": "mk",
    "Malay": "ms",
    "Persian (Farsi)": "fa",
    "Polish": "pl",
    "Portuguese": "pt",
    "Romanian": "ro",
    "Russian": "ru",
    "Spanish": "es",
    "Swahili": "sw",
    "Swedish": "sv",
    "Tagalog": "tl",
    "Thai": "th",
    "Turkish": "tr",
    "Vietnamese": "vi",
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
    sampling: dict[str, Any] = field(default_factory=dict)  # audio_* sampler overrides (moss; vllm-omni drops them)
    ref_audio: Path | None = None  # reference voice, resolved against the request file's folder
    ref_text: str | None = None  # its transcript: continuation mode


@dataclass
class Problem:
    line: int | None
    field: str | None
    message: str


# The order a record's problems are listed in: the order of the checks, unknown fields first.
CHECK_ORDER = ("text", "id", "seed", "max_new_frames", *SAMPLING_FIELDS, *PROMPT_FIELDS, "ref_audio", "ref_text")


def validate_record(
    record: dict, line: int, stem: str, problems: list[Problem], base: Path = Path(".")
) -> Request | None:
    """A parsed JSON object or CSV row as a Request: its keys and the JSON types of its text, id and
    reference are read here, the rest is `make_request`'s. Every problem is appended, in `CHECK_ORDER`."""
    found: list[Problem] = []

    def bad(field_name: str, message: str) -> None:
        found.append(Problem(line, field_name, message))

    for key in record:
        if key in OPENAI_SAMPLING:
            bad(str(key), sampler_refusal(key))
        elif key not in FIELDS:
            hint = difflib.get_close_matches(str(key), FIELDS, n=1)
            bad(
                str(key),
                f"unknown field {key!r}"
                + (f"; did you mean {hint[0]!r}?" if hint else f"; expected one of {', '.join(FIELDS)}"),
            )
    text = record.get("text")
    if not isinstance(text, str):
        bad("text", "missing 'text'" if text is None else f"'text' must be a string, got {type(text).__name__}")
        text = None
    request_id = record.get("id", f"{stem}-{line:05d}")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        bad("id", f"'id' must be a string, got {type(request_id).__name__}")
        request_id = None
    ref_audio, ref_text = record.get("ref_audio"), record.get("ref_text")
    if ref_audio is not None and (not isinstance(ref_audio, str) or not ref_audio.strip()):
        bad("ref_audio", "'ref_audio' must be a path to an audio file")
    elif ref_audio is not None and URL.match(ref_audio):
        try:
            local = file_uri_path(ref_audio)
        except ValueError as e:
            bad("ref_audio", f"'ref_audio' is a {e}; give the path of a file on this machine")
        else:
            if local is not None:
                # A file here, as a path is: read on this machine and sent to a server inline (a
                # data: URI), so the server needs no access to it (vllm-omni refuses a file://
                # ref_audio unless started with --allowed-local-media-path: docs/server-audit.md).
                ref_audio = local
            else:
                bad(
                    "ref_audio",
                    f"'ref_audio' is a URL ({ref_audio[:80]!r}); moss reads reference audio from local files and "
                    "does not fetch URLs: download the file and give its path (relative to the request file's folder)",
                )
    refused_audio = any(p.field == "ref_audio" for p in found)
    if ref_text is not None and not isinstance(ref_text, str):
        bad("ref_text", f"'ref_text' must be a string, got {type(ref_text).__name__}")
        ref_text = None
    request = make_request(
        found,
        line,
        id=None if request_id is None else str(request_id),
        text=text,
        seed=record.get("seed"),
        max_new_frames=record.get("max_new_frames"),
        prompt_fields={key: record[key] for key in PROMPT_FIELDS if key in record},
        sampling={key: record[key] for key in SAMPLING_FIELDS if key in record},
        ref_audio=None if ref_audio is None or refused_audio else base / Path(ref_audio).expanduser(),
        ref_text=None if refused_audio else ref_text,  # the transcript of a refused reference is not judged
    )
    problems += sorted(found, key=lambda p: CHECK_ORDER.index(p.field) if p.field in CHECK_ORDER else -1)
    return None if found else request


def make_request(
    problems: list[Problem],
    line: int,
    *,
    id: str | None,
    text: str | None,
    seed: Any = None,
    max_new_frames: Any = None,
    prompt_fields: dict[str, Any],
    sampling: dict[str, Any],
    ref_audio: Path | None = None,
    ref_text: str | None = None,
) -> Request | None:
    """moss's rules for one request, on the values of a request file's record or of a body (as
    pydantic read it): the Request, or None with each problem appended. A text or id of None was
    refused by its reader. A seed, frame budget, prompt field or sampler value may come as JSON wrote
    it (a file's record, a body's extra_params): each check's message names its type and range at once."""
    before = len(problems)

    def bad(field_name: str, message: str) -> None:
        problems.append(Problem(line, field_name, message))

    if text is not None and not text.strip():
        bad("text", "'text' is empty")
    if id is not None and (problem := _id_problem(id)):
        bad("id", problem)

    if seed is not None and (not is_int64(seed)):
        bad("seed", f"'seed' must be an integer in the signed 64-bit range, got {seed!r}")
    if max_new_frames is not None and (
        not is_integer(max_new_frames) or not 1 <= max_new_frames <= MAX_FRAMES_LIMIT
    ):  # 0 frames would be an empty file
        bad(
            "max_new_frames",
            f"'max_new_frames' must be an integer in [1, {MAX_FRAMES_LIMIT}], got {max_new_frames!r}",
        )

    checked_sampling = {}
    for key, (accepts, rule) in SAMPLING_RULES.items():
        value = sampling.get(key)
        if value is None:
            continue
        if is_number(value) and accepts(value):
            checked_sampling[key] = value
        else:
            bad(key, f"'{key}' must be {rule}, got {value!r}")

    fields = {}
    for key in PROMPT_FIELDS:
        value = prompt_fields.get(key)
        if value is None:
            continue
        problem = _prompt_field_problem(key, value)
        if problem:
            bad(key, problem)
        else:
            fields[key] = value
    if ref_text is not None and ref_audio is None:
        bad("ref_text", "'ref_text' is the transcript of 'ref_audio', which is missing")

    if len(problems) > before or text is None or id is None:
        return None
    return Request(
        id=id,
        text=text,
        line=line,
        seed=seed,
        max_new_frames=max_new_frames,
        prompt_fields=fields,
        sampling=checked_sampling,
        ref_audio=ref_audio,
        ref_text=ref_text if ref_text and ref_text.strip() else None,
    )


def _id_problem(id: str) -> str | None:
    """Why `id` cannot name the request's files, or None."""
    if not SAFE_ID.match(id) or id.lower().split(".")[0] in RESERVED_IDS:
        return (
            f"id {id!r} is not a safe file name: ASCII letters, digits, '.', '_' and '-' only, at "
            "most 128 characters, starting with a letter or digit (no leading '.', '_' or '-'), no path "
            "separators or '..', not a reserved name such as CON or NUL"
        )
    return f"id {id!r} must not contain '..'" if ".." in id else None


def _prompt_field_problem(key: str, value: Any) -> str | None:
    """What is wrong with a prompt field's value, or None."""
    if key == "tokens":
        if not is_integer(value) or value < 0:
            return f"'tokens' (duration hint in tokens) must be a non-negative integer, got {value!r}"
        return None
    if not isinstance(value, str):
        return f"'{key}' must be a string, got {type(value).__name__}"
    return _language_problem(value) if key == "language" else None


def sampler_refusal(key: str) -> str:
    """Why an OpenAI-style sampling field (`OPENAI_SAMPLING`) is refused, in a request file or a body."""
    return (
        f"{key!r} is not a request field: vllm-omni drops it silently and samples MOSS-TTS-Local audio at "
        f"fixed values ({AUDIO_SAMPLER_TEXT}); in moss (a local run, Ray workers, moss serve) "
        f"{OPENAI_SAMPLING[key]!r} overrides the audio sampler"
    )


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
    return f"unknown language {value!r}; expected a name or code the model was trained on: " + ", ".join(
        f"{name} ({code})" for name, code in LANGUAGES.items()
    )
