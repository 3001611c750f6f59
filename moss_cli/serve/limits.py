"""What a request must meet before the app reads it: the body's size limit, enforced while it is
received (a declared Content-Length over the limit is refused before a byte is read, a chunked body
as soon as it passes the limit), and the API key where the server has one."""

from __future__ import annotations

import hmac
import json

from starlette.exceptions import HTTPException

from .errors import ApiError


class BodyTooLarge(HTTPException):  # an HTTPException, so FastAPI's body reader lets it through
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than the {limit} bytes this server takes")


class BodyLimit:
    """ASGI middleware: 413 for bodies over `limit` bytes (the app's handlers render the error)."""

    def __init__(self, app, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers", ())).get(b"content-length", b"")
        too_large = declared.isdigit() and int(declared) > self.limit
        seen = 0

        async def limited():
            nonlocal seen
            if too_large:
                raise BodyTooLarge(self.limit)
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, limited, send)


class ApiKey:
    """ASGI middleware: every route but /health needs `Authorization: Bearer <key>` (as vLLM's
    --api-key); without it, 401 in the API's error shape, before the body is read. The key is
    compared in constant time and never echoed.

    A WebSocket upgrade is guarded too, as vLLM guards it: its AuthenticationMiddleware checks
    `websocket` scopes as it checks `http` ones and answers the upgrade with its 401 response
    (vllm/entrypoints/serve/middleware/authenticate.py:47-62, vLLM commit baaf6e9). The 401 goes
    out before the upgrade through ASGI's denial-response extension (uvicorn offers it); a server
    without that extension refuses the upgrade by closing before accepting it (policy violation,
    1008), which uvicorn answers with 403. Either way no session opens."""

    def __init__(self, app, key: str, open_paths: tuple[str, ...]) -> None:
        self.app = app
        self.expected = f"Bearer {key}".encode()
        self.open_paths = open_paths

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in self.open_paths:
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers", ())).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            return await self.app(scope, receive, send)
        error = ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'")
        body = json.dumps(error.body()).encode()
        headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        elif "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": 401, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong API key"})
