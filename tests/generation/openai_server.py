"""A tiny OpenAI-compatible `/v1/completions` server on loopback, for client tests.

It answers the way vLLM does with `return_tokens_as_token_ids`: log-prob tokens as
"token_id:<id>", top log-probs as dicts that include the sampled token. The completions come
from a real local `Engine`. Path prefixes select failure modes: /slow (sleeps past the client's
timeout), /garbage (not JSON), /error (HTTP 500), /nologprobs, /badtokens; /legacy omits the
`token_ids` field so the client has to read ids from the token strings.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kernelrl.generation import Engine, GenerationRequest, SamplingParams

MODES = ("", "slow", "garbage", "error", "nologprobs", "badtokens", "legacy")


class CompletionServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, engine: Engine) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.engine = engine
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.counter = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> CompletionServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: CompletionServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)

    def do_POST(self) -> None:
        mode, _, rest = self.path.strip("/").partition("/")
        if mode == "v1":
            mode, rest = "", "v1/" + rest
        if rest != "v1/completions" or mode not in MODES:
            self._send(404, b'{"error": "not found"}')
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        if mode == "slow":
            self.server.release.wait(10)
            self._send(200, b"{}")
        elif mode == "garbage":
            self._send(200, b'{"choices": [ {"text": "unterminated')
        elif mode == "error":
            self._send(500, b'{"error": "engine crashed"}')
        else:
            self._send(200, json.dumps(self._complete(body, mode)).encode())

    def _complete(self, body: dict[str, Any], mode: str) -> dict[str, Any]:
        k = int(body.get("logprobs") or 0)
        params = SamplingParams(
            temperature=body.get("temperature", 1.0),
            top_p=body.get("top_p", 1.0),
            top_k=max(0, body.get("top_k", 0)),
            max_new_tokens=body["max_tokens"],
            stop_token_ids=tuple(body.get("stop_token_ids") or ()),
            stop_strings=tuple(body.get("stop") or ()),
            ignore_eos=body.get("ignore_eos", False),
            seed=body.get("seed"),
            logprobs=k,
        )
        with self.server.lock:
            self.server.counter += 1
            res = self.server.engine.generate([GenerationRequest(body["prompt"], params, str(self.server.counter))])[0]
        tops = []
        for i, tok in enumerate(res.token_ids):
            entry = {f"token_id:{t}": v for t, v in zip(res.top_token_ids[i], res.top_logprobs[i], strict=True)} if k else {}
            entry[f"token_id:{tok}"] = res.logprobs[i]
            tops.append(entry)
        tokens = [f"token_id:{t}" for t in res.token_ids]
        if mode == "badtokens":
            tokens = [str(t) for t in res.token_ids]
        choice: dict[str, Any] = {
            "index": 0,
            "text": res.text,
            "logprobs": None if mode == "nologprobs" else {
                "text_offset": list(range(len(tokens))),
                "token_logprobs": res.logprobs,
                "tokens": tokens,
                "top_logprobs": tops,
            },
            "finish_reason": res.finish_reason,
            "stop_reason": res.stop_reason,
        }
        if mode not in ("legacy", "badtokens"):
            choice["token_ids"] = res.token_ids
        return {
            "id": f"cmpl-{self.server.counter}",
            "object": "text_completion",
            "model": body.get("model"),
            "choices": [choice],
            "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(tokens)},
        }
