"""Client for a remote OpenAI-compatible `/v1/completions` server (vLLM, SGLang) returning token ids.

Prompts go out as token-id lists; the client asks for log-probs with tokens rendered as
`token_id:<id>` (`return_tokens_as_token_ids`, plus `return_token_ids` where the server knows
it), so no tokenizer is needed on this side. Log-probs are whatever the server reports: vLLM's
default is the raw model distribution; start it with `--logprobs-mode processed_logprobs` to get
the sampling distribution after temperature/top-k/top-p, as the local `Engine` reports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kernelrl.generation.records import FINISH_REASONS, GenerationRequest, GenerationResult

if TYPE_CHECKING:
    import httpx


class RemoteGenerationError(RuntimeError):
    """A remote server could not be reached, timed out, failed, or answered something unusable."""


class OpenAICompletionsClient:
    """A `Generator` backed by a remote `/v1/completions` endpoint.

    base_url: server root, e.g. "http://127.0.0.1:8000" (the client appends "/v1/completions").
    timeout_s: per-request limit for connecting, reading and writing. max_concurrency: requests
    in flight at once. policy_version: stamped on every returned token; the caller bumps it when
    it syncs new weights to the server.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_concurrency: int = 8,
        policy_version: int = 0,
    ) -> None:
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError("OpenAICompletionsClient needs httpx: pip install 'kernelrl[agent]'") from e
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.policy_version = policy_version
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http: httpx.Client = httpx.Client(
            timeout=httpx.Timeout(timeout_s),
            headers=headers,
            limits=httpx.Limits(max_connections=max_concurrency),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAICompletionsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Send each request (up to `max_concurrency` at once); results in the order of `requests`."""
        if len(requests) <= 1:
            return [self._one(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests))) as pool:
            return list(pool.map(self._one, requests))

    def request_body(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON body sent for `request` (OpenAI fields plus the vLLM/SGLang extensions)."""
        p = request.params
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(request.prompt_token_ids),
            "max_tokens": p.max_new_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "logprobs": max(1, p.logprobs),
            "n": 1,
            "stream": False,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "ignore_eos": p.ignore_eos,
        }
        if p.top_k:
            body["top_k"] = p.top_k
        if p.seed is not None:
            body["seed"] = p.seed
        if p.stop_strings:
            body["stop"] = list(p.stop_strings)
        if p.stop_token_ids:
            body["stop_token_ids"] = list(p.stop_token_ids)
        return body

    def _one(self, request: GenerationRequest) -> GenerationResult:
        import httpx

        rid = request.request_id
        version = self.policy_version
        try:
            resp = self._http.post(self.url, json=self.request_body(request))
        except httpx.TimeoutException as e:
            raise RemoteGenerationError(
                f"request {rid!r} to {self.url} timed out after {self.timeout_s:g} s ({type(e).__name__})"
            ) from e
        except httpx.HTTPError as e:
            raise RemoteGenerationError(f"request {rid!r} to {self.url} failed: {e!r}") from e
        if resp.status_code != 200:
            raise RemoteGenerationError(
                f"request {rid!r}: {self.url} answered HTTP {resp.status_code}: {resp.text[:300]!r}"
            )
        try:
            payload = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RemoteGenerationError(
                f"request {rid!r}: malformed JSON from {self.url}: {e}; body starts {resp.text[:200]!r}"
            ) from e
        try:
            return parse_completion(payload, request, version)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise RemoteGenerationError(
                f"request {rid!r}: unusable completion from {self.url}: {e!r}; "
                f"body starts {json.dumps(payload)[:200]!r}"
            ) from e


def parse_completion(payload: dict[str, Any], request: GenerationRequest, policy_version: int) -> GenerationResult:
    """A `GenerationResult` from a `/v1/completions` response body (the first choice)."""
    choice = payload["choices"][0]
    lp = choice["logprobs"]
    if lp is None:
        raise ValueError("the server returned no logprobs")
    logprobs = [float(x) for x in lp["token_logprobs"]]
    tokens = choice.get("token_ids") or [_token_id(t) for t in lp["tokens"]]
    tokens = [int(t) for t in tokens]
    if len(tokens) != len(logprobs):
        raise ValueError(f"{len(tokens)} tokens but {len(logprobs)} log-probs")
    reason = choice.get("finish_reason")
    if reason not in FINISH_REASONS:
        raise ValueError(f"unknown finish_reason {reason!r}")
    k = request.params.logprobs
    top_ids: list[list[int]] | None = None
    top_lps: list[list[float]] | None = None
    if k:
        top_ids, top_lps = [], []
        for entry in lp.get("top_logprobs") or [None] * len(tokens):
            pairs = sorted(((_token_id(t), float(v)) for t, v in (entry or {}).items()), key=lambda x: -x[1])[:k]
            top_ids.append([t for t, _ in pairs])
            top_lps.append([v for _, v in pairs])
        if len(top_ids) != len(tokens):
            raise ValueError(f"{len(tokens)} tokens but {len(top_ids)} top-logprob entries")
    stop_reason = choice.get("stop_reason")
    return GenerationResult(
        request_id=request.request_id,
        prompt_token_ids=list(request.prompt_token_ids),
        token_ids=tokens,
        logprobs=logprobs,
        policy_versions=[policy_version] * len(tokens),
        finish_reason=reason,
        group_id=request.group_id,
        top_token_ids=top_ids,
        top_logprobs=top_lps,
        stop_reason=stop_reason if isinstance(stop_reason, int | str) else None,
        text=choice.get("text"),
    )


def _token_id(token: str) -> int:
    """The id in a `token_id:<id>` token string."""
    prefix = "token_id:"
    if not isinstance(token, str) or not token.startswith(prefix):
        raise ValueError(f"token {token!r} is not in 'token_id:<id>' form; start vLLM so it returns token ids")
    return int(token[len(prefix) :])
