"""Committed results cannot go stale silently (issue 28 part 3).

For every committed results file (src/kernelrl/repro/results/, bench/results/*.json that records a config or
was written by hand) `kernelrl.repro.record.staleness` says why it no longer stands for today's code: its
config does not load with today's schema (or lacks fields it has), its revision predates the last commit that
changed the code it ran (`git log -1 -- CODE` and `git merge-base --is-ancestor`), it ran with uncommitted
changes, or it was written by hand. The files known to be stale at this commit are listed, each with the
command that regenerates it, in src/kernelrl/repro/results/KNOWN_STALE.toml: a stale file not listed there
fails, and so does a listed file that is no longer stale. The checker itself is tested on a scratch git repo.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from kernelrl.repro.record import (
    RESULTS_DIR,
    config_problems,
    render_report,
    repo_root,
    revision_problems,
    staleness,
)
from kernelrl.train.config import load_config

KNOWN_STALE = RESULTS_DIR / "KNOWN_STALE.toml"
ROOT = RESULTS_DIR.parents[3]  # the source tree (a git checkout or not)


def known_stale() -> dict[str, dict[str, str]]:
    """KNOWN_STALE.toml's entries by repository-relative path."""
    entries = tomllib.loads(KNOWN_STALE.read_text()).get("stale", [])  # none listed: every result is fresh
    for e in entries:
        assert {"file", "why", "regenerate"} <= set(e), f"KNOWN_STALE.toml entry needs file, why, regenerate: {e}"
    return {e["file"]: e for e in entries}


def committed_results() -> list[Path]:
    return sorted([*RESULTS_DIR.glob("*.json"), *(ROOT / "bench" / "results").glob("*.json")])


def reports_without_results() -> dict[str, list[str]]:
    """Committed reports with no results file next to them (their numbers cannot be checked)."""
    out = {}
    for report in sorted(RESULTS_DIR.glob("*-report.md")):
        name = report.name.removesuffix("-report.md")
        if not any((RESULTS_DIR / f"{name}{tail}").is_file() for tail in (".json", "-results.json")):
            out[str(report.relative_to(ROOT))] = ["a committed report without a results file"]
    return out


def stale_now(root: Path | None) -> dict[str, list[str]]:
    """Every committed results file that is stale, with why (`root` None: the config checks only)."""
    out = reports_without_results()
    for path in committed_results():
        why = staleness(root, path)
        if why:
            out[str(path.relative_to(ROOT))] = why
    return out


def _explain(files: dict[str, list[str]]) -> str:
    return "\n".join(f"  {f}: {'; '.join(why)}" for f, why in files.items())


def test_known_stale_entries_name_committed_files() -> None:
    for file in known_stale():
        assert (ROOT / file).is_file(), f"KNOWN_STALE.toml lists {file}, which is not committed"


def test_committed_configs_load_with_todays_schema() -> None:
    """(a), in any source tree: a results file whose config no longer loads must be listed as stale."""
    unlisted = {f: why for f, why in stale_now(None).items() if f not in known_stale()}
    assert not unlisted, ("stale results not in src/kernelrl/repro/results/KNOWN_STALE.toml (regenerate them, "
                          "or list them with the command that does):\n" + _explain(unlisted))


def test_known_stale_list_is_exact() -> None:
    """(b): revisions against the last change to the code each file ran; the list neither lags nor leads."""
    root = repo_root()
    if root is None:
        pytest.skip("not a git checkout of kernelrl: revisions cannot be compared with the code's history")
    if subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=root, capture_output=True,
                      text=True).stdout.strip() == "true":
        pytest.skip("shallow git clone: the commits the results record may be missing from its history")
    stale, known = stale_now(root), known_stale()
    unlisted = {f: why for f, why in stale.items() if f not in known}
    fresh = [f for f in known if f not in stale]
    assert not unlisted, ("stale results not in src/kernelrl/repro/results/KNOWN_STALE.toml (regenerate them, "
                          "or list them with the command that does):\n" + _explain(unlisted))
    assert not fresh, f"no longer stale, delete from KNOWN_STALE.toml: {fresh}"


# ------------------------------------------------------------------------------------- the checker itself


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, path: str, text: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    _git(repo, "add", path)
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"edit {path}")
    return _git(repo, "rev-parse", "HEAD")


def test_revision_check_on_a_scratch_repo(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    first = _commit(tmp_path, "src/kernelrl/repro/drkernel.py", "v1\n")
    assert revision_problems(tmp_path, "drkernel", {"revision": first}) == []
    second = _commit(tmp_path, "src/kernelrl/train/trainer.py", "changed\n")  # code the repro ran
    problems = revision_problems(tmp_path, "drkernel", {"revision": first})
    assert len(problems) == 1 and f"predates {second[:10]}" in problems[0]
    _commit(tmp_path, "src/kernelrl/train/RESULTS.md", "docs\n")  # docs and other repros' code: not its code
    _commit(tmp_path, "src/kernelrl/repro/proxy.py", "another repro\n")
    _commit(tmp_path, "src/kernelrl/repro/drkernel_report.py", "rendering only\n")
    assert revision_problems(tmp_path, "drkernel", {"revision": second[:7]}) == []  # a short hash resolves
    assert revision_problems(tmp_path, "proxy", {"revision": second}) != []
    assert revision_problems(tmp_path, "drkernel", {}) == ["records no revision"]
    assert "not a commit" in revision_problems(tmp_path, "drkernel", {"revision": "kernelrl 0.1.0"})[0]
    dirty = revision_problems(tmp_path, "drkernel", {"revision": second, "dirty": ["src/kernelrl/rl/trloo.py",
                                                                                  "README.md"]})
    assert dirty == ["ran with uncommitted changes to its code: src/kernelrl/rl/trloo.py"]


def test_config_and_hand_written_checks(tmp_path: Path) -> None:
    today = load_config("tiny-cpu").model_dump(mode="json")
    assert config_problems("drkernel", today) == []
    assert "does not load" in config_problems("drkernel", {**today, "retired_field": 1})[0]
    older = json.loads(json.dumps(today))
    del older["rl"]["gamma"]
    assert config_problems("drkernel", older) == ["config lacks fields today's schema has: rl.gamma"]
    bench = tmp_path / "bench" / "results"
    bench.mkdir(parents=True)
    (bench / "main_job_tiny_cpu.json").write_text(json.dumps({"command": "kernelrl train (by hand)", "results": {}}))
    assert staleness(None, bench / "main_job_tiny_cpu.json") == [
        "hand-written: no command wrote it, and it records no config"]
    (bench / "bench_x.json").write_text(json.dumps({"command": "python bench/bench_x.py", "results": {"n": 1}}))
    assert staleness(None, bench / "bench_x.json") is None  # a microbenchmark's own record: no config to check
    (bench / "main_job_tiny_cpu.json").write_text(json.dumps(
        {"command": "python bench/bench_main_job.py", "revision": "", "results": {"config": today}}))
    assert staleness(None, bench / "main_job_tiny_cpu.json") == []


def test_a_hand_edited_report_is_caught(tmp_path: Path) -> None:
    """A committed record's report must be what the record renders (`--report-only`), byte for byte."""
    from kernelrl.repro.stats import paired

    record = {"repro": "drkernel", "revision": "abc", "config": load_config("tiny-cpu").model_dump(mode="json"),
              "seed_list": [0, 1], "arms": {}, "lazy": {}, "self_inclusion": {}, "test_time": {},
              "times": {"total_s": 1.0}, "seeds": {s: {"arms": {a: {"heldout_after_sft": {"sampled_pass_rate": 0.5},
                                                                    "heldout_after_rl": {"sampled_pass_rate": r}}
                                                                for a, r in (("grpo", 0.5), ("trloo", 0.6 + i / 10))}}
                                                  for i, s in enumerate(("0", "1"))}}
    record |= {"lazy_seeds": [0], "lazy_steps": 2, "lazy_comparison": {"per_seed": {}, **paired([0.1])}}
    record["algo_comparison"] = {"metric": "sampled_pass_rate", "same_start": True,
                                 "per_seed": {"0": {"grpo": 0.5, "trloo": 0.6}, "1": {"grpo": 0.5, "trloo": 0.7}},
                                 **paired([0.1, 0.2])}
    (tmp_path / "drkernel.json").write_text(json.dumps(record))
    (tmp_path / "drkernel-report.md").write_text(render_report("drkernel", record))
    assert "underpowered" in render_report("drkernel", record)  # 2 seeds, +0.1 and +0.2: the interval spans 0
    assert staleness(None, tmp_path / "drkernel.json") == []
    (tmp_path / "drkernel-report.md").write_text(render_report("drkernel", record).replace("+0.1500", "+0.2500"))
    assert "differs from what the record renders" in staleness(None, tmp_path / "drkernel.json")[0]


def test_cuda_agent_bench_writes_a_checkable_record(tmp_path: Path) -> None:
    """bench/bench_cuda_agent_tiny.py at a seconds-sized override: its record carries a config that loads."""
    import importlib.util

    from tests.train.test_stages import SECONDS

    spec = importlib.util.spec_from_file_location("bench_cuda_agent_tiny", ROOT / "bench" / "bench_cuda_agent_tiny.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    record = module.run(tmp_path / "run", SECONDS)
    assert list(record["stages"]) == ["sft", "warmup_rl", "rft", "critic", "ppo"]
    assert record["wall_s"] > 0 and record["process_tree_cpu_s"] > 0
    assert config_problems("cuda_agent_tiny", record["config"]) == []
    assert record["config"]["pipeline"]["stages"] and record["config"]["sft"]["steps"] == 10
