"""A real OpenAI-compatible chat-completions server on 127.0.0.1 (stdlib http.server) with scripted replies.

`reply(request) -> dict` decides each answer: `{"content": str}`, `{"tool_calls": [...]}`,
`{"status": 503}` (an HTTP error) or `{"sleep": s, ...}` (answer late). Every request body is kept.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict[str, Any]], dict[str, Any]]


class ChatServer:
    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.active = 0
        self.peak_active = 0
        self._lock = threading.Lock()
        self._ids = itertools.count()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append(body)
                    server.active += 1
                    server.peak_active = max(server.peak_active, server.active)
                try:
                    answer = server.reply(body)
                    time.sleep(answer.get("sleep", 0.0))
                finally:
                    with server._lock:
                        server.active -= 1
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": "not found"}})
                if "status" in answer:
                    return self._send(answer["status"], {"error": {"message": "scripted failure", "type": "server_error"}})
                self._send(200, server.completion(body, answer))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def completion(self, request: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": answer.get("content")}
        if answer.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"call_{next(self._ids)}", "type": "function",
                 "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                for c in answer["tool_calls"]
            ]
        prompt_chars = sum(len(m.get("content") or "") for m in request["messages"])
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if answer.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": prompt_chars // 4 + 7, "completion_tokens": len(answer.get("content") or "") // 4 + 3,
                      "total_tokens": 0},
        }

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
