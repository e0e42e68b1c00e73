"""The tool-calling variant: `compile`, `verify` and `profile` as OpenAI-style tools run against the pool."""

from __future__ import annotations

import json
from typing import Any

from kernelrl.agent.feedback import TokenCounter, approx_tokens, compact_result, truncate_to_tokens
from kernelrl.evaluate.candidate import Candidate
from kernelrl.evaluate.config import EvalConfig
from kernelrl.evaluate.pool import EvalPool
from kernelrl.evaluate.result import EvalResult
from kernelrl.rewards.kernel import compiled
from kernelrl.tasks.task import Task


def _schema(name: str, description: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "the complete Python module defining ModelNew"}},
                "required": ["code"],
                "additionalProperties": False,
            },
        },
    }


TOOL_SCHEMAS: list[dict[str, Any]] = [
    _schema("compile", "Build the module (Python import and kernel compilation) and report compiler errors."),
    _schema("verify", "Compile, then check ModelNew against the reference model on random inputs."),
    _schema("profile", "Compile, verify, then time ModelNew against eager PyTorch and report the speedup."),
]
TOOL_NAMES = tuple(s["function"]["name"] for s in TOOL_SCHEMAS)


class ToolExecutor:
    """Runs the model's tool calls for one task through the evaluation pool (never in this process)."""

    def __init__(self, pool: EvalPool, task: Task, backend: str, config: EvalConfig | None = None,
                 max_tokens: int = 512, count_tokens: TokenCounter = approx_tokens) -> None:
        self.pool, self.task, self.backend = pool, task, backend
        self.config = config or pool.config
        self.max_tokens, self.count_tokens = max_tokens, count_tokens
        self.calls: list[dict[str, Any]] = []

    def config_for(self, tool: str) -> EvalConfig:
        if tool == "compile":
            return self.config.replace(correctness_trials=1, measure_timing=False)
        if tool == "verify":
            return self.config.replace(measure_timing=False)
        return self.config

    def run(self, tool: str, arguments: dict[str, Any]) -> tuple[str, EvalResult | None]:
        """The tool's answer (JSON text for the model) and the evaluation behind it."""
        if tool not in TOOL_NAMES:
            return json.dumps({"error": f"unknown tool {tool!r}; available: {', '.join(TOOL_NAMES)}"}), None
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return json.dumps({"error": "pass the complete module as the string argument `code`"}), None
        result = self.pool.evaluate(self.task, Candidate(code, self.backend), self.config_for(tool))
        self.calls.append({"tool": tool, "status": str(result.status)})
        return self.describe(tool, result), result

    def describe(self, tool: str, result: EvalResult) -> str:
        data = compact_result(result)
        if tool == "compile":
            built = compiled(result)  # an NKI rule breaks at the kernel's first call, after the build stage
            data = {"compiled": built, **({"error": data["error"]} if not built and "error" in data else {})}
        elif tool == "verify":
            data.pop("timing", None)
        return truncate_to_tokens(json.dumps(data, separators=(",", ":")), self.max_tokens, self.count_tokens)
