"""Errors in the shape vllm-omni answers them: `{"error": {"message", "type", "param", "code"}}`,
`code` the HTTP status, `type` vLLM's name for it (vllm_omni/entrypoints/openai/serving_speech.py:
2700-2733; vLLM 0.30's entrypoints/serve/exception_handling/error_response.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from http import HTTPStatus

from ..vllm_omni import EXTRA_PARAMS, RENAMED

# vLLM's error types where vllm-omni's speech route has one; other statuses carry their HTTP phrase,
# as vLLM writes the errors it raises with a status of their own.
TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}
SCHEMA = "Bad Request"  # vLLM's type for a body its request model refuses (the HTTP phrase)


@dataclass
class ApiError(Exception):
    """A request the server refuses (4xx) or could not serve (5xx); `param` names the body field."""

    status: int
    message: str
    param: str | None = None
    retry_after_s: int | None = field(default=None, kw_only=True)  # 503: when to try again (Retry-After)
    kind: str | None = field(default=None, kw_only=True)  # the error's `type`, where not the status's (TYPES)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def body(self) -> dict:
        kind = self.kind or TYPES.get(self.status) or HTTPStatus(self.status).phrase
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


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
    """One error for all problems of a body (the shape has one `param`: the first problem's)."""
    message = "; ".join(body_words(f"{field}: {text}" if field else text) for field, text in problems)
    return ApiError(status, message, problems[0][0] if problems else None)


def schema_error(errors: list[dict]) -> ApiError:
    """pydantic's errors (wrong JSON types, values out of range) as one 400 naming the first field,
    where vllm-omni answers the same 400 (vLLM's handlers/validation.py; FastAPI's default is 422),
    with its `type` ("Bad Request") and its `param` ("body.<field>")."""
    if errors and errors[0].get("type") == "json_invalid":
        return ApiError(400, f"the body is not valid JSON ({errors[0].get('ctx', {}).get('error', 'malformed')})")
    problems: dict[str | None, str] = {}
    for error in errors:
        # The field is the location's first name; a union's alternatives add their types after it.
        where = [str(part) for part in error.get("loc", ()) if part != "body"]
        field = where[0] if where else None
        if field not in problems:  # one problem per field: a union's first alternative says enough
            problems[field] = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if None in problems and len(problems) == 1 and "dictionary" in problems[None]:
        return ApiError(400, "the body must be a JSON object", kind=SCHEMA)
    error = invalid(list(problems.items()) or [(None, "invalid body")])
    return replace(error, param=error.param and f"body.{error.param}", kind=SCHEMA)
