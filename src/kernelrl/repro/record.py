"""The ``results.json`` every `kernelrl repro NAME` writes, and which code each repro's numbers depend on.

A record holds the repro's name, the revision it ran at (the git commit of HEAD, plus the tracked source
files that differed from it, or ``kernelrl <version>`` outside a git checkout), the command, the resolved
config, every seed's numbers and the wall time. Reports are rendered from this file alone
(``--report-only``). `CODE` names, per repro, the paths whose change makes a recorded result stale;
``tests/repro/test_results_fresh.py`` checks the committed results against it (and against
``results/KNOWN_STALE.toml``, the list of committed results known to be stale).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import kernelrl

PACKAGE_ROOT = Path(kernelrl.__file__).resolve().parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: paths (relative to the repository root) and exclusions that never change a number (docs, reports' rendering,
#: the red-team corpus)
_NOT_CODE = ("**/*.md", "src/kernelrl/repro/*_report.py", "src/kernelrl/evaluate/redteam_corpus/**",
             "src/kernelrl/repro/results/**")
_TRAINING = ("src/kernelrl/train", "src/kernelrl/rl", "src/kernelrl/generation", "src/kernelrl/rewards",
             "src/kernelrl/evaluate", "src/kernelrl/tasks", "src/kernelrl/native", "src/kernelrl/config_system.py",
             "src/kernelrl/registry.py")
#: repro (or bench record) -> the code its numbers depend on
CODE: dict[str, tuple[str, ...]] = {
    "drkernel": ("src/kernelrl/repro/drkernel.py", "src/kernelrl/repro/stats.py", *_TRAINING),
    "direct-opd": ("src/kernelrl/repro/direct_opd.py", "src/kernelrl/repro/stats.py", "src/kernelrl/repro/seeds.py",
                   *_TRAINING),
    "proxy": ("src/kernelrl/repro/proxy.py", "src/kernelrl/proxy", "src/kernelrl/config_system.py"),
    "nki-agent": ("src/kernelrl/repro/nki_agent.py", "src/kernelrl/repro/stats.py", "src/kernelrl/repro/seeds.py",
                  "src/kernelrl/nki",
                  "src/kernelrl/agent", *_TRAINING),
    "cuda-agent": ("src/kernelrl/repro/cuda_agent.py", "src/kernelrl/repro/stats.py", "src/kernelrl/repro/seeds.py",
                   *_TRAINING),
    "cuda_agent_tiny": ("bench/bench_cuda_agent_tiny.py", *_TRAINING),
    "main_job_tiny_cpu": ("bench/bench_main_job.py", *_TRAINING),
}


def pathspecs(name: str) -> list[str]:
    """`CODE[name]` as git pathspecs (with the `_NOT_CODE` exclusions)."""
    return [*CODE[name], *(f":(exclude,glob){p}" for p in _NOT_CODE)]


def _git(*args: str, cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def repo_root(start: Path = PACKAGE_ROOT) -> Path | None:
    """The git checkout this package's source lives in (None: an installed package, or no git)."""
    top = _git("rev-parse", "--show-toplevel", cwd=start)
    return Path(top) if top and (Path(top) / "src" / "kernelrl").resolve() == PACKAGE_ROOT else None


def revision() -> dict[str, Any]:
    """``{"revision": HEAD's full commit, "dirty": tracked files under src/ and bench/ that differ from it}``, or
    ``{"revision": "kernelrl <version>", "dirty": []}`` outside a git checkout."""
    root = repo_root()
    head = _git("rev-parse", "HEAD", cwd=root) if root else None
    if root is None or head is None:
        return {"revision": f"kernelrl {kernelrl.__version__}", "dirty": []}
    changed = _git("diff", "--name-only", "HEAD", "--", "src", "bench", cwd=root) or ""
    return {"revision": head, "dirty": sorted(changed.split())}


def machine() -> dict[str, Any]:
    """What a seeded run's numbers depend on beyond the code: the CPU, the cores, torch and the vector kernels it
    picked (AVX2 and AVX512 kernels round differently, so one seed can take another path on another machine)."""
    import torch

    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "torch": torch.__version__,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def new_record(repro: str, config: dict[str, Any]) -> dict[str, Any]:
    """The head of a results record: name, revision, command, date, the machine and the resolved config (JSON-safe)."""
    return {"repro": repro, **revision(), "command": " ".join(["kernelrl", *sys.argv[1:]]),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "machine": machine(),
            "config": json.loads(json.dumps(config, default=str))}


#: what every record holds (``seed_list``: the seeds it ran; multi-seed repros keep each seed's numbers in ``seeds``)
REQUIRED = ("repro", "revision", "dirty", "command", "date", "config", "seed_list", "wall_s")


def missing_keys(record: dict[str, Any]) -> list[str]:
    """`REQUIRED` keys a finished record lacks (and seeds of ``seed_list`` missing from ``seeds``, if present)."""
    out = [k for k in REQUIRED if k not in record]
    if "seeds" in record:
        out += [f"seeds.{s}" for s in record.get("seed_list", []) if str(s) not in record["seeds"]]
    return out


def write_record(out: Path, record: dict[str, Any]) -> Path:
    """Write ``results.json`` under `out` (the whole record: the report is rendered from it)."""
    path = Path(out) / "results.json"
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    return path


def read_record(out: str | Path) -> dict[str, Any]:
    """A run's ``results.json`` (FileNotFoundError naming the directory when there is none)."""
    path = Path(out) / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"no results.json in {out}; run the repro there first")
    return json.loads(path.read_text())


def load_config(name: str, config: dict[str, Any]) -> Any:
    """`config` (as a record holds it) loaded with today's schema of repro `name`; raises when it does not load."""
    if name == "proxy":
        from kernelrl.config_system import validate
        from kernelrl.repro.proxy import ScalingConfig

        return validate(ScalingConfig, config, "recorded proxy config")
    from kernelrl.config_system import validate
    from kernelrl.train.config import TrainConfig

    return validate(TrainConfig, config, f"recorded {name} config")


def _dump(cfg: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else cfg.model_dump(mode="json")


def missing_fields(recorded: Any, today: Any, prefix: str = "") -> list[str]:
    """Dotted names of today's config fields a recorded config lacks (it ran with an older schema)."""
    if not isinstance(today, dict) or not isinstance(recorded, dict):
        return []
    out = []
    for key, value in today.items():
        if key not in recorded:
            out.append(prefix + key)
        else:
            out += missing_fields(recorded[key], value, f"{prefix}{key}.")
    return out


def config_problems(name: str, config: dict[str, Any]) -> list[str]:
    """Why a recorded config does not stand for a run of today's code: it fails to load, or lacks fields."""
    try:
        cfg = load_config(name, config)
    except (ValueError, TypeError) as exc:
        return [f"config does not load with today's schema: {str(exc).splitlines()[0]}"]
    missing = missing_fields(config, _dump(cfg))
    return [f"config lacks fields today's schema has: {', '.join(missing[:8])}"
            + (f" (+{len(missing) - 8} more)" if len(missing) > 8 else "")] if missing else []


def record_name(path: Path, data: dict[str, Any]) -> str | None:
    """Which entry of `CODE` a committed results file belongs to: its ``repro`` field, else its file name."""
    if data.get("repro") in CODE:
        return data["repro"]
    return next((n for n in CODE if path.stem == n or path.stem.startswith(f"{n}-")), None)


def _is_code(name: str, file: str) -> bool:
    import fnmatch

    return (any(file == p or file.startswith(p.rstrip("/") + "/") for p in CODE[name])
            and not any(fnmatch.fnmatch(file, p.replace("**/", "")) for p in _NOT_CODE))


def revision_problems(root: Path, name: str, data: dict[str, Any]) -> list[str]:
    """Why a record's revision does not vouch for today's code `CODE[name]` in the checkout at `root`."""
    rev = data.get("revision")
    if not rev:
        return ["records no revision"]
    commit = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=root)
    if commit is None:
        return [f"revision {rev!r} is not a commit of this checkout"]
    last = _git("log", "-1", "--format=%H %s", "--", *pathspecs(name), cwd=root)
    out = []
    if last and _git("merge-base", "--is-ancestor", last.split()[0], commit, cwd=root) is None:
        out.append(f"revision {commit[:10]} predates {last[:10]} ({last[41:][:70]}), a later change to its code")
    dirty = [f for f in data.get("dirty", []) if _is_code(name, f)]
    if dirty:
        out.append(f"ran with uncommitted changes to its code: {', '.join(dirty[:4])}")
    return out


def staleness(root: Path | None, path: Path) -> list[str] | None:
    """Why the committed results file `path` is stale ([] when fresh); None when it records no config and is
    a bench script's own record (out of scope). `root`: the git checkout, or None to check the config only."""
    data = json.loads(path.read_text())
    body = data.get("results", data) if isinstance(data.get("results"), dict) else data
    config = data.get("config") or body.get("config")
    name = record_name(path, data)
    bench_written = str(data.get("command", "")).startswith("python bench/")
    if config is None:
        if path.parent.name == "results" and path.parent.parent.name == "bench" and bench_written:
            return None
        return ["hand-written: no command wrote it, and it records no config" if not bench_written
                else "records no config"]
    if name is None:
        return [f"no entry in kernelrl.repro.record.CODE for {path.name}: which code made it is unknown"]
    problems = config_problems(name, config) + report_problems(path, data)
    if root is not None:
        problems += revision_problems(root, name, data)
    return problems


def render_report(name: str, record: dict[str, Any]) -> str:
    """Repro `name`'s Markdown report from a record alone (what ``--report-only`` writes)."""
    import importlib

    module = {"drkernel": "drkernel", "direct-opd": "direct_opd_report", "proxy": "proxy_report",
              "nki-agent": "nki_agent_report", "cuda-agent": "cuda_agent_report"}[name]
    return importlib.import_module(f"kernelrl.repro.{module}").report(record)


def report_problems(path: Path, data: dict[str, Any]) -> list[str]:
    """For a committed record with a report next to it (``NAME-report.md``): whether re-rendering the record
    gives that report (else it was edited by hand, or rendered from other numbers)."""
    name = data.get("repro")
    report = path.with_name(f"{name}-report.md")
    if name not in ("drkernel", "direct-opd", "proxy", "nki-agent", "cuda-agent") or not report.is_file():
        return []
    try:
        same = render_report(name, data) == report.read_text()
    except (KeyError, TypeError, ValueError) as exc:
        return [f"its report no longer renders from it ({type(exc).__name__}: {exc}): run --report-only"]
    return [] if same else [f"{report.name} differs from what the record renders: regenerate it with --report-only"]
