"""Task synthesis: op shape rules, composition, filters, dedup (own and against benchmarks), CLI."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import torch

from kernelrl.cli import main
from kernelrl.tasks import load_tasks, suite_path
from kernelrl.tasks.synth import (
    OPS,
    REASONS,
    DedupIndex,
    Dim,
    SynthConfig,
    canonical_hash,
    compose,
    difficulty,
    op_signature,
    synthesize,
    write_tasks,
)
from kernelrl.tasks.synth.compose import FAMILIES
from kernelrl.tasks.synth.ops import KIND_COST
from kernelrl.tasks.synth.pipeline import FilterTimeout, compile_check, time_limit
from kernelrl.tasks.validate import validate_source

SHAPES = {2: (4, 64), 3: (2, 16, 32), 4: (2, 16, 16, 16)}
NAMES = {2: ("batch_size", "features"), 3: ("batch_size", "seq_len", "dim"), 4: ("batch_size", "channels", "height", "width")}


@pytest.mark.parametrize("name", OPS.names())
def test_every_op_output_matches_its_shape_rule(name: str) -> None:
    spec = OPS.get(name)
    assert spec.kind in KIND_COST and spec.ranks and spec.dtypes == ("float32",)
    for rank in spec.ranks:
        sizes = dict(zip(NAMES[rank], SHAPES[rank], strict=True))
        step = spec.make(random.Random(0), tuple(Dim(k, v) for k, v in sizes.items()), "op")
        assert step is not None, (name, rank)
        module = torch.nn.Module()
        scope = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "self": module, **sizes}
        for line in step.init:
            exec(line, scope)
        x = torch.randn(*SHAPES[rank])
        y = eval(step.forward, scope | {"x": x})
        assert tuple(y.shape) == tuple(d.value for d in step.shape), (name, rank)
        assert all(eval(d.expr, scope) == d.value for d in step.shape), (name, rank)
        assert y.dtype == torch.float32


def test_composition_is_seeded_and_shapes_are_consistent() -> None:
    first = [compose(random.Random(7), 4, f"t{i}").source for i in range(3)]
    assert first == [compose(random.Random(7), 4, f"t{i}").source for i in range(3)]
    rng = random.Random(11)
    tasks = [compose(rng, 5, f"t{i}") for i in range(30)]
    assert len({t.source for t in tasks}) > 20
    assert {t.family for t in tasks} == set(FAMILIES)
    assert all(1 <= len(t.ops) <= 5 for t in tasks)
    for task in tasks[:10]:  # every composition builds and runs in eager with the shapes it claims
        check = validate_source(task.source, runtime_ms=None)
        assert check.first_problem in (None, "input-dependent", "not-constant"), (task.ops, check.problems)


def test_difficulty_and_dedup_primitives() -> None:
    assert difficulty(["activation"]) == "easy"
    assert difficulty(["matmul", "activation"]) == "medium"
    assert difficulty(["conv", "norm", "activation"]) == "hard"
    source = compose(random.Random(3), 3, "a").source
    noisy = source.replace('"""Synthesized', '# a comment\n"""Other words.\n\nSynthesized').replace("synth/a", "synth/b")
    assert canonical_hash(source) == canonical_hash(noisy)
    kernelbench_style = (
        "import torch\nclass Model(torch.nn.Module):\n    def __init__(self, i, o):\n        super().__init__()\n"
        "        self.gemm = torch.nn.Linear(i, o)\n    def forward(self, x):\n"
        "        return torch.nn.functional.gelu(self.gemm(x)).view(-1)\n"
        "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n"
    )
    assert op_signature(kernelbench_style) == ("linear", "gelu")
    index = DedupIndex()
    index.add(kernelbench_style, "bench/linear_gelu")
    ours = (suite_path(2) / "02_Linear_GELU_Scale.py").read_text()
    assert index.check(ours) == ("near-duplicate", "bench/linear_gelu")
    assert index.check((suite_path(1) / "01_ReLU.py").read_text()) is None


def test_time_limit_stops_a_hanging_filter() -> None:
    start = time.perf_counter()
    with pytest.raises(FilterTimeout), time_limit(0.3):
        while True:
            pass
    assert time.perf_counter() - start < 2.0


def test_synthesize_filters_dedups_and_writes(tmp_path: Path) -> None:
    config = SynthConfig(n=12, seed=5, max_ops=4, exclude=[suite_path()])
    result = synthesize(config)
    assert len(result.tasks) == 12 and result.attempts == 12 + sum(result.rejected.values())
    assert set(result.rejected) == set(REASONS)
    assert result.rejected["excluded"] > 0  # single ops of the shipped suites come up and are refused
    benchmark = DedupIndex.from_directory(suite_path())
    signatures = [op_signature(t.task.source) for t in result.tasks]
    assert len(set(signatures)) == len(signatures)
    assert not any(benchmark.check(t.task.source) for t in result.tasks)
    for item in result.tasks:
        assert item.check.ok and 0.1 <= item.check.runtime_ms <= 100.0
        assert f"difficulty:{item.task.difficulty}" in item.task.source
    manifest = write_tasks(result, tmp_path)
    records = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert [r["id"] for r in records] == [f"synth/{t.task.name}" for t in result.tasks]
    loaded = load_tasks(tmp_path)
    assert sorted(t.id for t in loaded) == sorted(r["id"] for r in records)
    assert all(t.level in (1, 2) and "gpu" in t.profiles and "synthetic" in t.tags for t in loaded)
    again = synthesize(SynthConfig(n=12, seed=5, max_ops=4, exclude=[suite_path()]))
    assert [t.task.source for t in again.tasks] == [t.task.source for t in result.tasks]
    assert all(t.check.runtime_basis == "estimated" for t in result.tasks)


def test_the_runtime_window_is_the_same_under_load() -> None:
    """The synthesis window prices what a task computes: a CPU hog beside it changes nothing (the measured
    window did: a task near its lower end went in or out with the machine's load)."""
    import subprocess
    import sys

    quiet = [t.task.source for t in synthesize(SynthConfig(n=6, seed=11, max_ops=3)).tasks]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = [t.task.source for t in synthesize(SynthConfig(n=6, seed=11, max_ops=3)).tasks]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert loaded == quiet


def test_estimated_cost_orders_work() -> None:
    """More elements, transcendental math and matmul flops cost more; views cost nothing."""
    import torch

    from kernelrl.tasks.cost import count_work

    x = torch.randn(256, 512)
    relu = count_work(torch.relu, [x])
    gelu = count_work(torch.nn.functional.gelu, [x])
    big = count_work(torch.relu, [torch.randn(1024, 512)])
    view = count_work(lambda t: t.view(-1), [x])
    mm = count_work(torch.mm, [x, torch.randn(512, 512)])
    assert relu.ops == 1 and view.ops == 0 and view.estimated_ms == 0.0
    assert relu.estimated_ms < gelu.estimated_ms and relu.estimated_ms < big.estimated_ms
    assert mm.flops == 2 * 256 * 512 * 512 and mm.estimated_ms > relu.estimated_ms


def test_compile_filter_runs_traced_model() -> None:
    source = compose(random.Random(2), 3, "c", family="vector").source
    assert compile_check(source, backend="aot_eager") is None
    result = synthesize(SynthConfig(n=2, seed=1, max_ops=3, compile=True, compile_backend="aot_eager"))
    assert len(result.tasks) == 2


def test_synth_cli_writes_tasks_manifest_and_rejection_report(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "synth"
    code = main(["tasks", "synth", "--n", "4", "--out", str(out), "--seed", "2", "--max-ops", "3",
                 "--exclude", str(suite_path())])
    assert code == 0
    assert len(list(out.glob("*.py"))) == 4 and len((out / "manifest.jsonl").read_text().splitlines()) == 4
    err = capsys.readouterr().err
    assert "near-duplicate" in err and "validated tasks/s" in err
    assert main(["tasks", "synth", "--n", "1", "--out", str(out), "--exclude", str(tmp_path / "missing")]) == 2


def test_synth_flags_default_to_the_config_dataclass() -> None:
    """`tasks synth` flags not given leave `SynthConfig`'s own defaults (one source); given ones win."""
    from kernelrl.cli import build_parser
    from kernelrl.cli.tasks_cmd import synth_config

    parse = build_parser().parse_args
    assert synth_config(parse(["tasks", "synth", "--n", "3", "--out", "x"])) == SynthConfig(n=3)
    given = synth_config(parse(["tasks", "synth", "--n", "2", "--out", "x", "--max-ms", "50", "--seed", "7",
                                "--compile", "--exclude", "a", "--runtime-basis", "measured"]))
    assert given == SynthConfig(n=2, seed=7, compile=True, exclude=[Path("a")], runtime_basis="measured",
                                runtime_ms=(SynthConfig(n=1).runtime_ms[0], 50.0))
