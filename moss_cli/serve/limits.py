"""The request body's size limit, enforced while it is received: a declared Content-Length over
the limit is refused before a byte is read, and a chunked body as soon as it passes the limit."""

from __future__ import annotations

from starlette.exceptions import HTTPException


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
