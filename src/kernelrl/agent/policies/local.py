"""Local models: a small `Generator` interface (the generation engine plugs in here) and a transformers default."""

from __future__ import annotations

import concurrent.futures as cf
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kernelrl.agent.policies.base import POLICIES, Completion, PolicyError, RequestContext
from kernelrl.agent.records import Usage


@dataclass
class Generation:
    """One sampled continuation and its token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = "stop"  # stop | length


@runtime_checkable
class Generator(Protocol):
    """Batched text generation. `kernelrl.generation` engines and vLLM adapters implement this."""

    def render(self, messages: list[dict[str, Any]]) -> str:
        """The prompt text for a chat (the model's chat template)."""
        ...

    def generate(
        self, prompts: list[str], max_new_tokens: int, temperature: float, seed: int | None = None
    ) -> list[Generation]: ...


def fallback_chat_format(messages: list[dict[str, Any]]) -> str:
    """A plain chat format for tokenizers without a chat template."""
    parts = [f"<|{m['role']}|>\n{m.get('content') or ''}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


class TransformersGenerator:
    """`Generator` over a `transformers` causal LM and its tokenizer (`model.generate`)."""

    def __init__(self, model: Any, tokenizer: Any, device: str | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = device or str(next(model.parameters()).device)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        tokenizer.padding_side = "left"
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, path: str, device: str = "cpu", dtype: str = "auto") -> TransformersGenerator:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
        return cls(model, tokenizer, device)

    def render(self, messages: list[dict[str, Any]]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            plain = [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
            return self.tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
        return fallback_chat_format(messages)

    def generate(
        self, prompts: list[str], max_new_tokens: int, temperature: float, seed: int | None = None
    ) -> list[Generation]:
        import torch

        with self._lock, torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            batch = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
            sampling: dict[str, Any] = {"do_sample": temperature > 0}
            if temperature > 0:
                sampling["temperature"] = temperature
            output = self.model.generate(
                **batch, max_new_tokens=max_new_tokens, pad_token_id=self.tokenizer.pad_token_id, **sampling
            )
        width = batch["input_ids"].shape[1]
        results = []
        eos = self.tokenizer.eos_token_id
        for row, mask in zip(output, batch["attention_mask"], strict=True):
            new = row[width:].tolist()
            pad = self.tokenizer.pad_token_id
            while new and new[-1] == pad and pad != eos:
                new.pop()
            stopped = eos is not None and eos in new
            if stopped:
                new = new[: new.index(eos)]
            text = self.tokenizer.decode(new, skip_special_tokens=True)
            results.append(Generation(
                text=text, prompt_tokens=int(mask.sum()), completion_tokens=len(new) + int(stopped),
                finish_reason="stop" if stopped else "length",
            ))
        return results


class _Batcher:
    """Collects concurrent requests (one per episode thread) into batched `generate` calls."""

    def __init__(self, generator: Generator, max_batch: int, wait_s: float) -> None:
        self.generator, self.max_batch, self.wait_s = generator, max_batch, wait_s
        self.requests: queue.Queue[tuple[str, int, float, int | None, cf.Future[Generation]]] = queue.Queue()
        self.batch_sizes: list[int] = []
        threading.Thread(target=self._loop, daemon=True, name="local-policy-batcher").start()

    def submit(self, prompt: str, max_tokens: int, temperature: float, seed: int | None) -> Generation:
        future: cf.Future[Generation] = cf.Future()
        self.requests.put((prompt, max_tokens, temperature, seed, future))
        return future.result()

    def _loop(self) -> None:
        while True:
            batch = [self.requests.get()]
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.requests.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            self.batch_sizes.append(len(batch))
            _, _, temperature, seed, _ = batch[0]
            try:  # one call per batch: the first request's sampling settings and seed apply to all
                outs = self.generator.generate([b[0] for b in batch], max(b[1] for b in batch), temperature, seed)
                for item, out in zip(batch, outs, strict=True):
                    item[4].set_result(out)
            except Exception as exc:
                for item in batch:
                    item[4].set_exception(exc)


@POLICIES.register("transformers", "local")
class LocalPolicy:
    """A policy over any `Generator`; by default a transformers model loaded from `model` (a path).

    With `max_batch > 1`, requests that arrive together (concurrent episodes of a bench run) are
    generated as one batch; within a batch the first request's seed applies.
    """

    supports_tools = False

    def __init__(
        self,
        model: str | None = None,
        generator: Generator | None = None,
        max_tokens: int = 2048,
        temperature: float = 0.0,
        device: str = "cpu",
        max_batch: int = 1,
        batch_wait_s: float = 0.05,
        name: str | None = None,
    ) -> None:
        if generator is None:
            if model is None:
                raise ValueError("LocalPolicy needs a model path or a generator")
            generator = TransformersGenerator.from_pretrained(model, device=device)
        self.generator = generator
        self.name = name or f"local:{model or type(generator).__name__}"
        self.max_tokens, self.temperature = max_tokens, temperature
        self.batcher = _Batcher(generator, max_batch, batch_wait_s) if max_batch > 1 else None

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
        context: RequestContext | None = None,
    ) -> Completion:
        if tools:
            raise PolicyError(f"{self.name} does not support tool calling")
        prompt = self.generator.render(messages)
        seed = context.seed if context else None
        try:
            if self.batcher is not None:
                out = self.batcher.submit(prompt, self.max_tokens, self.temperature, seed)
            else:
                (out,) = self.generator.generate([prompt], self.max_tokens, self.temperature, seed)
        except Exception as exc:
            raise PolicyError(f"{self.name}: generation failed: {exc}") from exc
        usage = Usage(prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens, calls=1)
        return Completion(text=out.text, usage=usage, finish_reason=out.finish_reason)
