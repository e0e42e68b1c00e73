"""Code extraction, prompts and feedback formatting (pure text; no model, no pool)."""

from __future__ import annotations

import json

import pytest

from kernelrl.agent import (
    PromptConfig,
    extract_code,
    format_feedback,
    initial_messages,
    task_prompt,
    truncate_to_tokens,
)
from kernelrl.agent.feedback import approx_tokens
from kernelrl.config_system import ConfigError
from kernelrl.evaluate.result import Correctness, EvalResult, StageReport, Status, Timing
from tests.agent.helpers import relu_task

MODEL = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_last_python_block_with_model_new_wins() -> None:
    text = f"Draft:\n```python\nclass ModelNew: broken = 1\n```\nFinal:\n```python\n{MODEL}```\nDone, hope it helps!"
    assert extract_code(text) == MODEL


def test_prefers_block_defining_model_new_over_later_helper_block() -> None:
    text = f"```python\n{MODEL}```\nUsage example:\n```python\nm = ModelNew()\n```"
    assert extract_code(text) == MODEL


@pytest.mark.parametrize("tag", ["python", "py", "Python3", "", "python title=solution.py"])
def test_language_tags(tag: str) -> None:
    assert extract_code(f"text\n```{tag}\n{MODEL}```\n") == MODEL


def test_non_python_blocks_are_ignored() -> None:
    text = f"The kernel:\n```cpp\nvoid f() {{}}\n```\nThe module:\n```python\n{MODEL}```\n```bash\npip install x\n```"
    assert extract_code(text) == MODEL


def test_tilde_fences_and_crlf() -> None:
    assert extract_code(f"~~~python\r\n{MODEL}~~~\r\n".replace("\n", "\r\n")) == MODEL


def test_missing_fences_bare_code_with_prose_around() -> None:
    text = f"Sure! Here is the solution:\n\n{MODEL}\nThis should be much faster."
    assert extract_code(text) == MODEL


def test_unclosed_block_of_a_truncated_answer() -> None:
    assert extract_code(f"ok\n```python\n{MODEL}") == MODEL


def test_reasoning_in_think_tags_is_ignored() -> None:
    text = f"<think>\n```python\nclass ModelNew: old\n```\n</think>\n```python\n{MODEL}```"
    assert extract_code(text) == MODEL


def test_no_code_at_all() -> None:
    assert extract_code("I am not sure how to do this. Could you clarify?") is None
    assert extract_code("```cpp\nint main() {}\n```") is None


def test_cpu_prompt_holds_task_rules_helper_and_contract() -> None:
    task = relu_task()
    text = task_prompt(task, PromptConfig(backend="cpu"))
    assert task.source.strip() in text
    for needle in ("class ModelNew(nn.Module)", "same arguments", "load_cpp", "contiguous", "float32",
                   "must run in your own kernel", "```python", "test/scaled_relu"):
        assert needle in text, needle
    messages = initial_messages(task)
    assert [m["role"] for m in messages] == ["system", "user"]


def test_backend_specific_prompts() -> None:
    task = relu_task()
    assert "triton.jit" in task_prompt(task, PromptConfig(backend="triton"))
    assert "load_cuda" in task_prompt(task, PromptConfig(backend="cuda"))
    assert "`verify`" in task_prompt(task, PromptConfig(tools=True))
    assert "nl.tile_size.pmax" in task_prompt(task, PromptConfig(backend="nki"))
    with pytest.raises(ConfigError, match=r"backend: must be 'cpu', 'triton', 'cuda' or 'nki' \(got 'tpu'\)"):
        PromptConfig(backend="tpu")  # refused by the config itself, before any prompt is built


RESULT = EvalResult(
    status=Status.COMPILE_ERROR, task_id="t", backend="cpu",
    stages=[StageReport("static", "ok", 0.0), StageReport("build", "failed", 0.1)],
    error="compiler error:\ncandidate.py:7:41: error: 'undefined_symbol' was not declared\n" + "x" * 5000,
    feedback="status: compile_error\nstage: build\ncompiler error: undefined_symbol\n" + "y" * 5000,
    static_findings=[{"severity": "warn", "message": "no cpu kernel found"}],
)


def test_truncation_keeps_head_and_tail_within_budget() -> None:
    text = "HEAD " + "m" * 4000 + " TAIL"
    cut = truncate_to_tokens(text, 100)
    assert approx_tokens(cut) <= 100 and cut.startswith("HEAD") and cut.endswith("TAIL") and "[cut]" in cut
    assert truncate_to_tokens("short", 100) == "short"


@pytest.mark.parametrize("mode", ["text", "json"])
def test_feedback_fits_the_budget_and_names_the_error(mode: str) -> None:
    message = format_feedback(RESULT, mode=mode, max_tokens=200)
    assert approx_tokens(message) <= 200
    assert "undefined_symbol" in message and "Fix the problem" in message


def test_json_feedback_is_compact_json() -> None:
    ok = EvalResult(status=Status.OK, task_id="t", backend="cpu",
                    correctness=Correctness(trials=3, passed=3, rtol=1e-4, atol=1e-5),
                    timing=Timing(candidate_ms=1.0, reference_ms=2.5, speedup=2.5, meaningful=True))
    message = format_feedback(ok, mode="json", max_tokens=400, target_speedup=4.0)
    payload = json.loads(message.split("\n")[1])
    assert payload == {"status": "ok", "correctness": {"passed": 3, "trials": 3, "max_abs_error": 0.0},
                       "timing": {"candidate_ms": 1.0, "reference_ms": 2.5, "speedup": 2.5}}
    assert "2.50x" in message and "target 4x" in message


def test_feedback_without_code_asks_for_a_fenced_block() -> None:
    assert "```python" in format_feedback(None)
    with pytest.raises(ValueError):
        format_feedback(RESULT, mode="yaml")


def test_budget_with_a_real_tokenizer_counter() -> None:
    def words(text: str) -> int:  # a stand-in tokenizer: one token per whitespace-separated word
        return len(text.split())

    message = format_feedback(RESULT, max_tokens=40, count=words)
    assert words(message) <= 40 and "undefined_symbol" in message


def test_indented_fences_in_a_list_item() -> None:
    indented = "".join("   " + line for line in MODEL.splitlines(keepends=True))
    assert extract_code(f"1. The module:\n   ```python\n{indented}   ```\n2. Done.") == MODEL
