"""Errors as the OpenAI API shapes them: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

from dataclasses import dataclass

from ..speech_api import EXTRA_PARAMS, RENAMED

TYPES = {404: "not_found_error", 503: "service_unavailable"}  # others: invalid_request_error / server_error
CODES = {400: "invalid_value", 413: "request_too_large", 422: "invalid_type"}


@dataclass
class ApiError(Exception):
    """A request the server refuses (4xx) or could not serve (5xx); `param` names the body field."""

    status: int
    message: str
    param: str | None = None
    code: str | int | None = None  # None: CODES' word for the status, else the status itself
    retry_after_s: int | None = None  # 503: when to try again (the Retry-After header)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def body(self) -> dict:
        server = self.status >= 500
        kind = TYPES.get(self.status, "server_error" if server else "invalid_request_error")
        code = self.code or CODES.get(self.status, "server_error" if server else self.status)
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": code}}


def body_field(record_field: str | None) -> str | None:
    """The body's name for a request-file field (`text` -> `input`, `tokens` -> `extra_params.tokens`)."""
    if record_field in RENAMED:
        return RENAMED[record_field]
    if record_field in EXTRA_PARAMS:
        return f"extra_params.{record_field}"
    return record_field


def body_words(message: str) -> str:
    """A request-file check's message in the body's names: `'text' is empty` -> `'input' is empty`."""
    for name in (*RENAMED, *EXTRA_PARAMS):
        message = message.replace(f"'{name}'", f"'{body_field(name)}'")
    return message


def invalid(problems: list[tuple[str | None, str]], status: int = 400) -> ApiError:
    """One error for all problems of a body (OpenAI's shape has one `param`: the first problem's)."""
    message = "; ".join(body_words(f"{field}: {text}" if field else text) for field, text in problems)
    return ApiError(status, message, problems[0][0] if problems else None)
