"""`ref_audio` as a server takes it: a base64 `data:` URI, or a path / `file://` URI that resolves
inside `--allowed-media-dir`. URLs are never fetched (a server that fetches what a body names can be
turned against its own network), and other local paths are refused (a body must not read the
server's files)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..validation import file_uri_path
from .errors import ApiError

PARAM = "ref_audio"
# The file types libsndfile reads; the name only helps a person reading a temporary file's name.
SUFFIXES = {"audio/wav": ".wav", "audio/x-wav": ".wav", "audio/wave": ".wav", "audio/flac": ".flac"}
SUFFIXES["audio/ogg"] = ".ogg"


@dataclass(frozen=True)
class Media:
    data: bytes
    suffix: str  # for the private temporary file the reference reader opens


def reference_media(value: str, *, allowed_dir: Path | None, limit: int) -> Media:
    """The bytes of a body's `ref_audio`, or an ApiError (400; 413 past `limit` bytes)."""
    scheme = urlsplit(value).scheme.lower() if "://" in value or value.startswith("data:") else ""
    if scheme == "data":
        return _data_uri(value, limit)
    if scheme in ("http", "https"):
        raise ApiError(400, "moss serve never fetches URLs; send the audio inline as a base64 data: URI", PARAM)
    if scheme not in ("", "file"):
        raise ApiError(400, f"unsupported ref_audio scheme {scheme!r}; send a base64 data: URI", PARAM)
    if allowed_dir is None:
        raise ApiError(
            400,
            "local paths are refused: send the audio as a base64 data: URI, or start the server with "
            "--allowed-media-dir DIR and name a file inside it",
            PARAM,
        )
    return _allowed_file(value, scheme, allowed_dir, limit)


def _data_uri(value: str, limit: int) -> Media:
    header, comma, payload = value.partition(",")
    if not comma or not header.endswith(";base64"):
        raise ApiError(400, "a data: URI must be base64: data:audio/wav;base64,<data>", PARAM)
    media = header[len("data:") : -len(";base64")].split(";")[0].strip().lower()
    if len(payload) * 3 // 4 > limit:  # before decoding anything
        raise ApiError(413, f"ref_audio is larger than the {limit} bytes a reference may have", PARAM)
    try:
        data = base64.b64decode(payload.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "ref_audio is not valid base64", PARAM) from None
    return Media(data, SUFFIXES.get(media, ".audio"))


def _allowed_file(value: str, scheme: str, allowed_dir: Path, limit: int) -> Media:
    if scheme == "file":
        try:
            value = file_uri_path(value)
        except ValueError as e:
            raise ApiError(400, f"{e}; it is refused", PARAM) from None
    root = allowed_dir.resolve()
    path = (root / value).resolve()  # symlinks and `..` resolved before the check
    if not path.is_relative_to(root):
        raise ApiError(400, "ref_audio is outside --allowed-media-dir", PARAM)
    try:
        if not path.is_file():
            raise ApiError(400, "ref_audio does not name a file inside --allowed-media-dir", PARAM)
        if path.stat().st_size > limit:
            raise ApiError(413, f"ref_audio is larger than the {limit} bytes a reference may have", PARAM)
        data = path.read_bytes()
    except OSError as e:
        raise ApiError(400, f"ref_audio cannot be read ({e.strerror})", PARAM) from None
    return Media(data, path.suffix.lower() or ".audio")
