"""Local models: a small `Generator` interface (the generation engine plugs in here) and a transformers default."""

from __future__ import annotations

import threading
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


@POLICIES.register("transformers", "local")
class LocalPolicy:
    """A policy over any `Generator`; by default a transformers model loaded from `model` (a path)."""

    supports_tools = False

    def __init__(
        self,
        model: str | None = None,
        generator: Generator | None = None,
        max_tokens: int = 2048,
        temperature: float = 0.0,
        device: str = "cpu",
        name: str | None = None,
    ) -> None:
        if generator is None:
            if model is None:
                raise ValueError("LocalPolicy needs a model path or a generator")
            generator = TransformersGenerator.from_pretrained(model, device=device)
        self.generator = generator
        self.name = name or f"local:{model or type(generator).__name__}"
        self.max_tokens, self.temperature = max_tokens, temperature

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
        context: RequestContext | None = None,
    ) -> Completion:
        if tools:
            raise PolicyError(f"{self.name} does not support tool calling")
        prompt = self.generator.render(messages)
        seed = context.seed if context else None
        try:
            (out,) = self.generator.generate([prompt], self.max_tokens, self.temperature, seed)
        except Exception as exc:
            raise PolicyError(f"{self.name}: generation failed: {exc}") from exc
        usage = Usage(prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens, calls=1)
        return Completion(text=out.text, usage=usage, finish_reason=out.finish_reason)
