"""The `kernelrl` command line, run as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.evaluate.candidates import KERNEL_WRONG_VALUES as WRONG_VALUES
from tests.evaluate.candidates import RELU_TASK


def kernelrl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelrl.cli", *args], capture_output=True, text=True, timeout=300)


def test_eval_default_runs_the_shipped_example() -> None:
    proc = kernelrl("eval", "--json", "--timing-trials", "5")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "ok" and result["timing"]["speedup"] > 0


def test_eval_exit_code_reflects_the_verdict(tmp_path: Path) -> None:
    (tmp_path / "task.py").write_text(RELU_TASK)
    (tmp_path / "cand.py").write_text(WRONG_VALUES)
    proc = kernelrl("eval", "--task", str(tmp_path / "task.py"), "--candidate", str(tmp_path / "cand.py"))
    assert proc.returncode == 1
    assert "incorrect" in proc.stdout and "elements differ" in proc.stdout


def test_eval_bad_task_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "task.py").write_text("def get_inputs(:\n")
    (tmp_path / "cand.py").write_text(WRONG_VALUES)
    proc = kernelrl("eval", "--task", str(tmp_path / "task.py"), "--candidate", str(tmp_path / "cand.py"))
    assert proc.returncode == 2 and "task.py: syntax error at line 1" in proc.stderr


def test_tasks_list(tmp_path: Path) -> None:
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_Relu.py").write_text(RELU_TASK)
    proc = kernelrl("tasks", "list", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["id"] == "level1/1_Relu"


def test_tasks_size_options_and_progress(tmp_path: Path) -> None:
    """--size, --max-mb and --profile on list/validate/export, with a progress bar on stderr."""
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_Relu.py").write_text(RELU_TASK.replace("n = 4096", "n = 1048576"))
    proc = kernelrl("tasks", "list", str(tmp_path), "--json", "--max-mb", "1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["size_overrides"]["n"][1] < 1048576
    assert "sizing" in proc.stderr and "task" in proc.stderr  # the bar
    proc = kernelrl("tasks", "list", str(tmp_path), "--json", "--size", "n=1000")
    assert json.loads(proc.stdout.splitlines()[0])["size_overrides"]["n"] == [1048576, 1000]
    proc = kernelrl("tasks", "validate", str(tmp_path), "--size", "n=65536", "--min-ms", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "validating" in proc.stderr and "1/1 valid" in proc.stdout
    out = tmp_path / "out.jsonl"
    proc = kernelrl("tasks", "export", str(tmp_path), "--out", str(out), "--max-mb", "1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(json.loads(out.read_text().splitlines()[0])["size_overrides"])["n"][1] < 1048576
