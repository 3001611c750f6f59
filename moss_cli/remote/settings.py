"""How to reach a speech server, and the secrets (auth headers, credentials in the URL) that
must never reach a terminal, a log or a report."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

from ..errors import MossError
from ..speech_api import RESPONSE_FORMATS

# Raw PCM carries no layout: without x-moss-* headers or options, that of MOSS-TTS-Local v1.5's codec,
# 48 kHz stereo int16, as vllm-omni serves it (model_executor/models/moss_tts/
# configuration_moss_audio_tokenizer_v2.py; deploy/moss_tts_local.yaml:1-3 in the 0.30.0 wheel).
DEFAULT_PCM_RATE = 48_000
DEFAULT_PCM_CHANNELS = 2
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")  # up to a space or quote (shlex quotes the word)


@dataclass(frozen=True)
class ServerOptions:
    url: str  # the server's base URL, e.g. http://127.0.0.1:8091
    headers: tuple[tuple[str, str], ...] = ()  # sent with every request (auth tokens): never shown
    timeout_s: float = 300.0  # each read (the first byte of an answer included)
    deadline_s: float | None = None  # a whole answer (None: --timeout and a second per frame: remote.bounds)
    retries: int = 0  # re-sends after a 5xx answer or a reset connection, each one reported
    concurrency: int = 8  # requests in flight at once, at most
    model: str | None = None  # the body's `model` (None: the server's own)
    response_format: str = "wav"
    sample_rate: int | None = None  # raw PCM: the rate when the server sends none in a header
    channels: int | None = None  # raw PCM: interleaved channels when the server sends none

    def __post_init__(self) -> None:
        problems = []
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            problems.append(("--server", "expected an http:// or https:// URL, e.g. http://127.0.0.1:8091"))
        if self.response_format not in RESPONSE_FORMATS:
            problems.append(("--response-format", f"expected one of {', '.join(RESPONSE_FORMATS)}"))
        for option, value, low in (
            ("--timeout", self.timeout_s, 0.0),
            ("--retries", self.retries, -1),
            ("--concurrency", self.concurrency, 0),
            ("--channels", DEFAULT_PCM_CHANNELS if self.channels is None else self.channels, 0),
        ):
            if not value > low:
                problems.append((option, f"must be {'>= 0' if low < 0 else '> 0'}, got {value}"))
        if self.deadline_s is not None and not self.deadline_s > 0:
            problems.append(("--deadline", f"must be > 0, got {self.deadline_s}"))
        if self.sample_rate is not None and self.sample_rate <= 0:
            problems.append(("--sample-rate", f"must be > 0, got {self.sample_rate}"))
        if problems:
            raise MossError("; ".join(f"{o}: {m}" for o, m in problems), field=problems[0][0])
        object.__setattr__(self, "url", without_api_version(self.url))

    @property
    def base_url(self) -> str:
        """The URL without its query (which `query` carries to every request)."""
        parts = urlsplit(self.url)
        return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))

    @property
    def query(self) -> str:
        """A query in --server (e.g. a gateway's `?key=...`), sent with every request."""
        return urlsplit(self.url).query

    @property
    def public_url(self) -> str:
        return public_url(self.url)

    @property
    def secrets(self) -> list[str]:
        """Values to blank out of anything shown or written: header values and URL credentials."""
        found = [value for _, value in self.headers]
        found += [value.split()[-1] for _, value in self.headers if len(value.split()[-1]) >= 6]  # "Bearer <token>"
        parts = urlsplit(self.url)
        found += [s for s in (parts.username, parts.password) if s]
        if parts.username or parts.password:  # sent as basic auth, which a server may echo
            pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
            found.append(base64.b64encode(pair.encode()).decode())
        if parts.query:
            found += [v for _, _, v in (q.partition("=") for q in parts.query.split("&")) if v]
        return [s for s in found if s]

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` as it may be shown or written: every URL in it with its user, password and query
    values masked (whatever their length), then every known secret (header values, a password a
    server echoes) replaced; one shorter than 3 characters only where it stands alone, or it would
    blank out half the text."""
    text = _URL.sub(lambda found: mask_url(found.group()), text)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, "***")
        else:
            text = re.sub(rf"(?<![0-9A-Za-z]){re.escape(secret)}(?![0-9A-Za-z])", "***", text)
    return text


def mask_url(url: str) -> str:
    """The URL with `***` for its user info, each query value and its fragment; the rest kept."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced IPv6 bracket: nothing in it can be trusted to be public
        return "***"
    userinfo, at, host = parts.netloc.rpartition("@")
    if at:
        host = ("***:***@" if ":" in userinfo else "***@") + host
    pairs = [pair.partition("=") for pair in parts.query.split("&") if pair]
    query = "&".join(f"{name}=***" if equals else "***" for name, equals, _ in pairs)
    return urlunsplit((parts.scheme, host, parts.path, query, "***" if parts.fragment else ""))


def mask_header(header: str) -> str:
    """`Name: value` with the value masked (a header given to be sent may carry a token)."""
    name, colon, _ = header.partition(":")
    return f"{name.strip()}: ***" if colon else "***"


def public_url(url: str) -> str:
    """The URL without user, password or query (where tokens live), for reports."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def parse_headers(values: list[str]) -> tuple[tuple[str, str], ...]:
    """`--header "Name: value"` options. A malformed one is named by its position, never echoed:
    it may hold a token."""
    headers, problems = [], []
    for i, raw in enumerate(values, start=1):
        name, colon, value = raw.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not _HEADER_NAME.match(name) or not value:
            problems.append(f"--header #{i} must look like 'Name: value' (its value is not shown)")
        else:
            headers.append((name, value))
    if problems:
        raise MossError("; ".join(problems), field="--header")
    return tuple(headers)


def without_api_version(url: str) -> str:
    """--server as the base the API's paths go under: an OpenAI client's base URL ends in /v1, which moss's
    paths (`/v1/audio/speech`, ...) already carry, so a trailing /v1 is dropped rather than doubled."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        return url
    return urlunsplit((parts.scheme, parts.netloc, path.removesuffix("/v1"), parts.query, parts.fragment))
