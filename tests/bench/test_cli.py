"""`kernelrl bench` as a real subprocess against a loopback chat server: interrupt, resume, compare, export."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.agent import helpers as H
from tests.agent.chat_server import ChatServer
from tests.agent.helpers import example_kernel, fenced, write_suite
from tests.evaluate import candidates as C

SRC = str(Path(__file__).resolve().parents[2] / "src")


def kernelrl(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelrl.cli", *args]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "OPENAI_API_KEY": "k"}


def episode_key(request: dict[str, Any]) -> tuple[str, int]:
    """(task id, sample) of a request: the prompt names the task, the seed encodes the sample."""
    prompt = next(m["content"] for m in request["messages"] if m["role"] == "user")
    task = re.search(r"task `([^`]+)`", prompt).group(1)
    return task, request["seed"] // 1000


def reply(request: dict[str, Any]) -> dict[str, Any]:
    task, _ = episode_key(request)
    if "scaled_relu" in task:
        turn = sum(m["role"] == "assistant" for m in request["messages"])
        return {"sleep": 0.3, "content": fenced(C.C_COMPILE_ERROR if turn == 0 else C.GOOD)}
    return {"sleep": 0.3, "content": fenced(example_kernel())}


def results(out: Path) -> list[tuple[str, int]]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    return [(r["task_id"], r["sample"]) for r in map(json.loads, path.read_text().splitlines())]


def test_interrupted_run_resumes_without_repeating_work(tmp_path: Path) -> None:
    suite, out = write_suite(tmp_path / "suite"), tmp_path / "run"
    # In the first run only the first two episodes asked for are answered at once; the others' answers wait,
    # so the interrupt lands mid-run however the runner pipelines requests and evaluations.
    holding, answered = [True], set()

    def slow_after_two(request: dict[str, Any]) -> dict[str, Any]:
        answer, key = reply(request), episode_key(request)
        if holding[0] and key not in answered:
            if len(answered) < 2:
                answered.add(key)
            else:
                answer["sleep"] = 20.0
        return answer

    with ChatServer(slow_after_two) as server:
        command = kernelrl("bench", "--suite", str(suite), "--policy", "openai", "--model", "m", "--base-url",
                           server.base_url, "--samples", "3", "--turns", "2", "--target-speedup", "0.01",
                           "--out", str(out), "--workers", "1", "--concurrency", "1", "--max-concurrency", "1",
                           "--trials", "2", "--timing-trials", "3", "--no-progress")
        # Ctrl-C as in a terminal: a test run started in the background (SIGINT ignored, as shells do for
        # `cmd &`) would hand that on, and Python then installs no KeyboardInterrupt handler
        proc = subprocess.Popen(command, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 120
        while len(results(out)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "interrupted" in err
        finished = results(out)
        assert 2 <= len(finished) < 6
        first_requests = len(server.requests)
        holding[0] = False

        rerun = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=240)
        assert rerun.returncode == 0, rerun.stderr
        assert f"skipped {len(finished)} already finished" in rerun.stderr
        second = {episode_key(r) for r in server.requests[first_requests:]}
    keys = results(out)
    assert len(keys) == len(set(keys)) == 6
    assert not second & set(finished)  # nothing finished in the first run was asked for again
    assert "pass@3" in rerun.stdout and (out / "report.md").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["policy"] == "openai:m" and config["episode"]["max_turns"] == 2


def test_compare_report_and_export(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "suite")
    answers = tmp_path / "answers"
    (answers / "level1__1_scaled_relu").mkdir(parents=True)
    (answers / "level1__1_scaled_relu" / "0.md").write_text(fenced(H.WRONG_KERNEL))
    (answers / "level2__1_scale_bias_relu.md").write_text(fenced(example_kernel()))
    common = ["--suite", str(suite), "--policy", "scripted", "--answers", str(answers), "--workers", "1",
              "--trials", "2", "--timing-trials", "3", "--no-progress"]
    one = subprocess.run(kernelrl("bench", *common, "--out", str(tmp_path / "a")), env=env(), capture_output=True, text=True, timeout=240)
    assert one.returncode == 0, one.stderr
    assert "correct (per sample)" in one.stdout and "50.0%" in one.stdout
    saved = tmp_path / "a" / "results.jsonl"
    yaml_config = tmp_path / "bench.yaml"
    yaml_config.write_text("episode:\n  max_turns: 1\n  feedback_mode: json\neval:\n  correctness_trials: 2\n"
                           "  timing_trials: 3\n")
    two = subprocess.run(kernelrl("bench", *common[:4], "--answers", str(saved), "--workers", "1", "--no-progress",
                                  "--config", str(yaml_config), "--turns", "2", "--out", str(tmp_path / "b")),
                         env=env(), capture_output=True, text=True, timeout=240)
    assert two.returncode == 0, two.stderr
    saved_config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert saved_config["episode"]["max_turns"] == 2 and saved_config["episode"]["feedback_mode"] == "json"
    assert saved_config["eval"]["timing_trials"] == 3 and '"max_turns":2' in two.stderr  # printed at start
    yaml_config.write_text("episode:\n  max_turn: 3\n")
    typo = subprocess.run(kernelrl("bench", *common, "--config", str(yaml_config), "--out", str(tmp_path / "c")),
                          env=env(), capture_output=True, text=True, timeout=120)
    assert typo.returncode == 2 and "episode.max_turn: unknown key" in typo.stderr
    cmp = subprocess.run(kernelrl("bench", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--markdown",
                                  str(tmp_path / "cmp.md")), env=env(), capture_output=True, text=True, timeout=120)
    assert cmp.returncode == 0, cmp.stderr
    text = (tmp_path / "cmp.md").read_text()
    assert str(tmp_path / "a") in text and "| pass@1 | 50.0% | 50.0% |" in text
    assert "| correct by turn 2 | – | 50.0% |" in text and "pass@1" in cmp.stdout
    exp = subprocess.run(kernelrl("bench", "export", str(tmp_path / "b"), "--mode", "sft", "--output",
                                  str(tmp_path / "sft.jsonl")), env=env(), capture_output=True, text=True, timeout=120)
    assert exp.returncode == 0 and "wrote 1 record" in exp.stdout
    bad = subprocess.run(kernelrl("bench", "--policy", "scripted"), env=env(), capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--suite is required" in bad.stderr
