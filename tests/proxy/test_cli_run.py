"""End to end: `kernelrl proxy run --preset smoke` in a subprocess, and its bad-input errors."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

SRC = Path(__file__).resolve().parents[2] / "src"


def proxy_command() -> list[str]:
    """`python -m kernelrl.cli proxy`; where this checkout cannot run the dispatcher as a module (no
    `kernelrl/cli/__main__.py`, or a sibling subcommand module in COMMANDS is missing, and the
    dispatcher imports them all), the proxy module's own entry point, which builds the same parser."""
    from kernelrl.cli import COMMANDS

    modules = ["kernelrl.cli.__main__", *COMMANDS.values()]
    if all(importlib.util.find_spec(m) is not None for m in modules):
        return [sys.executable, "-m", "kernelrl.cli", "proxy"]
    return [sys.executable, "-m", "kernelrl.cli.proxy_cmd"]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    return subprocess.run([*proxy_command(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_dispatcher_registers_the_proxy_command() -> None:
    from kernelrl.cli import COMMANDS
    from kernelrl.cli.proxy_cmd import register

    assert COMMANDS["proxy"] == "kernelrl.cli.proxy_cmd"
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["proxy", "run", "--preset", "smoke", "--set", "seed=3", "--out", "x"])
    assert args.preset == "smoke" and args.set == ["seed=3"] and callable(args.handler)


def test_smoke_run_writes_numbers_plot_and_settings(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli("run", "--preset", "smoke", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "preset: smoke" in proc.stdout  # the config is printed at start
    results = json.loads((out / "results.json").read_text())
    arms = {a["name"]: a for a in results["arms"]}
    assert list(arms) == ["bytes", "gzip", "tokenizer", "arith"]
    budget = results["budget_flops"]
    for arm in arms.values():
        assert math.isfinite(arm["final_bpb"]) and 0.0 < arm["final_bpb"] < 16.0
        assert arm["steps"] >= 2 and len(arm["curve"]) >= 2
        per_step = arm["flops"] / arm["steps"]
        assert budget - per_step < arm["flops"] <= budget  # equal compute, up to one step
    for name in ("gzip", "tokenizer", "arith"):
        assert arms[name]["compressor"]["roundtrip_ok"] is True
        assert arms[name]["mix"]["compressed_docs"] > 0
    assert arms["bytes"]["mix"]["compressed_docs"] == 0
    assert arms["tokenizer"]["compressor"]["separate_embeddings"] is True
    assert arms["tokenizer"]["vocab_size"] > 260
    table = (out / "results.md").read_text()
    row = re.search(r"^\| bytes \|.*\| (\d+\.\d{4}) \|", table, re.M)
    assert row and float(row.group(1)) == round(arms["bytes"]["final_bpb"], 4)
    assert (out / "bpb_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["preset"] == "smoke" and saved == results["config"]
    assert (out / "tokenizer.json").exists()


def test_bad_input_fails_with_a_named_problem(tmp_path: Path) -> None:
    proc = run_cli("run", "--preset", "smoke", "--set", "arms=[bytes, zstd]", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown compressor 'zstd'" in proc.stderr
    proc = run_cli("run", "--preset", "smoke", "--set", "train.budget_tokens=10", "--out", "o", cwd=tmp_path)
    assert proc.returncode == 2 and "compute budget too small" in proc.stderr
    proc = run_cli("run", "--preset", "nope", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown preset 'nope'" in proc.stderr
