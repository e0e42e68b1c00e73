"""A policy served by any OpenAI-compatible chat endpoint (vLLM, SGLang, OpenAI) through the `openai` client."""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

from kernelrl.agent.policies.base import POLICIES, Completion, PolicyError, RequestContext, ToolCall
from kernelrl.agent.records import Usage

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}


@POLICIES.register("openai", "http")
class OpenAIChatPolicy:
    """Chat completions with a concurrency limit, retries with exponential backoff and a timeout.

    The client's own retries are off, so every attempt is counted here (`Completion.retries`).
    `extra_body` passes server-specific sampling options (e.g. vLLM's `top_k`).
    """

    supports_tools = True

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        max_concurrency: int = 8,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 20.0,
        timeout_s: float = 300.0,
        temperature: float = 0.0,
        max_tokens: int = 4096,
        top_p: float | None = None,
        extra_body: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        import openai

        self.name = name or f"openai:{model}"
        self.model = model
        self.client = openai.OpenAI(
            base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=timeout_s,
            max_retries=0,
        )
        self.max_retries, self.backoff_s, self.max_backoff_s = max_retries, backoff_s, max_backoff_s
        self.temperature, self.max_tokens, self.top_p = temperature, max_tokens, top_p
        self.extra_body = extra_body or {}
        self._slots = threading.Semaphore(max_concurrency)
        self.max_concurrency = max_concurrency
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()

    def _retryable(self, exc: Exception) -> bool:
        import openai

        if isinstance(exc, openai.APIConnectionError | openai.APITimeoutError):
            return True
        return isinstance(exc, openai.APIStatusError) and exc.status_code in RETRYABLE_STATUS

    def _request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, seed: int | None) -> Any:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        if seed is not None:
            kwargs["seed"] = seed
        if tools:
            kwargs["tools"] = tools
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return self.client.chat.completions.create(**kwargs)

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
        context: RequestContext | None = None,
    ) -> Completion:
        seed = context.seed if context else None
        attempt = 0
        with self._slots:
            with self._lock:
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                while True:
                    try:
                        response = self._request(messages, tools, seed)
                        break
                    except Exception as exc:
                        if attempt >= self.max_retries or not self._retryable(exc):
                            raise PolicyError(f"{self.name}: request failed after {attempt + 1} attempt(s): {exc}") from exc
                        delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)
                        attempt += 1
                        time.sleep(delay)
            finally:
                with self._lock:
                    self.in_flight -= 1
        if not response.choices:
            raise PolicyError(f"{self.name}: the server returned no choices")
        choice = response.choices[0]
        usage = Usage(calls=1)
        if response.usage is not None:
            usage.prompt_tokens = response.usage.prompt_tokens or 0
            usage.completion_tokens = response.usage.completion_tokens or 0
        calls = [
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}")
            for c in (choice.message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        return Completion(
            text=choice.message.content or "",
            usage=usage,
            tool_calls=calls,
            finish_reason=choice.finish_reason or "",
            retries=attempt,
        )
