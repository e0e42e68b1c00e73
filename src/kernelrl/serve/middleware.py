"""ASGI middleware: request size limit (413), bearer-token auth (401/403), response counters.

Both checks run before the body is parsed, so an oversized or unauthenticated request costs little.
"""

from __future__ import annotations

import hmac
import json
from collections import Counter
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

OPEN_PATHS = ("/v1/health",)  # no token needed: load balancers and liveness probes


async def send_json(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None) -> None:
    payload = json.dumps(body).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())] + (headers or []),
    })
    await send({"type": "http.response.body", "body": payload})


class GuardMiddleware:
    """Rejects requests over `max_body` bytes (413) and, when a token is set, requests without it."""

    def __init__(self, app: ASGIApp, max_body: int, token: str | None, responses: Counter[int]) -> None:
        self.app = app
        self.max_body = max_body
        self.token = token
        self.responses = responses

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.responses[message["status"]] += 1
            await send(message)

        headers = dict(scope.get("headers") or [])
        if self.token and scope["path"] not in OPEN_PATHS:
            given = headers.get(b"authorization", b"").decode(errors="replace")
            if not given:
                await send_json(counting_send, 401, {"error": "missing auth: send the header 'Authorization: Bearer <token>'"},
                                [(b"www-authenticate", b"Bearer")])
                return
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), self.token.encode()):
                await send_json(counting_send, 403, {"error": "invalid auth token"})
                return
        length = headers.get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max_body
            except ValueError:
                await send_json(counting_send, 400, {"error": "invalid Content-Length header"})
                return
            if too_big:
                await send_json(counting_send, 413, self._too_big(int(length)))
                return
            await self.app(scope, receive, counting_send)
            return
        # No Content-Length (chunked): buffer up to the limit, then replay the body to the app.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_body:
                await send_json(counting_send, 413, self._too_big(size))
                return
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, counting_send)

    def _too_big(self, size: int) -> dict[str, Any]:
        return {"error": f"request body too large: {size} bytes, limit {self.max_body} bytes (server option --max-body-mb)"}
