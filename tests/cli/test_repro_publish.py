"""`kernelrl repro TARGET --publish`: a finished run's three files replace the committed ones under their names;
anything else is refused with the reason and copies nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelrl.cli.repro_cmd import publish


def _run_dir(root: Path, target: str, **record: object) -> Path:
    out = root / "run"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"repro": target, "wall_s": 12.0, **record}))
    (out / "report.md").write_text(f"# {target}\n")
    (out / f"{target}.png").write_bytes(b"\x89PNG")
    return out


@pytest.mark.parametrize(("target", "results_name"), [("drkernel", "drkernel.json"),
                                                      ("nki-agent", "nki-agent-results.json")])
def test_a_finished_run_replaces_the_committed_files(tmp_path: Path, target: str, results_name: str) -> None:
    out, dest = _run_dir(tmp_path, target), tmp_path / "results"
    dest.mkdir()
    (dest / results_name).write_text("old")
    written = publish(target, out, dest)
    assert [p.name for p in written] == [results_name, f"{target}-report.md", f"{target}.png"]
    assert json.loads((dest / results_name).read_text())["wall_s"] == 12.0
    assert (dest / f"{target}-report.md").read_text() == f"# {target}\n"


def test_another_targets_run_an_unfinished_run_or_a_missing_plot_publishes_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "results"
    dest.mkdir()
    out = _run_dir(tmp_path, "direct-opd")
    with pytest.raises(ValueError, match="is a run of 'direct-opd', not 'cuda-agent'"):
        publish("cuda-agent", out, dest)
    (out / "direct-opd.png").unlink()
    with pytest.raises(ValueError, match=r"direct-opd\.png not found"):
        publish("direct-opd", out, dest)
    (out / "direct-opd.png").write_bytes(b"")
    (out / "results.json").write_text(json.dumps({"repro": "direct-opd"}))
    with pytest.raises(ValueError, match="records no wall time"):
        publish("direct-opd", out, dest)
    assert not any(dest.iterdir())
