"""Shrinking GPU-sized KernelBench tasks: batch first, channels last, size expressions, chained and tuple
sizes, a forward on the CPU after shrinking, and whole directories with failures grouped."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelrl.tasks import TaskError, TaskLoadError, estimate_bytes, load_tasks, size_constants

MiB = 2**20

CONV = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple 2D convolution."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 64
in_channels = 16
out_channels = 32
height = width = 256
kernel_size = 3


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
'''

MATMUL_EXPR = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


N = 2048 * 2


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
'''

TUPLE_SHAPE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.tanh(x)


batch_size = 8
input_shape = (4096, 1024)


def get_inputs():
    return [torch.randn(batch_size, *input_shape)]


def get_init_inputs():
    return []
'''

LINEAR = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x)


batch_size = 2
in_features = 4096
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

# Shrinking `dim` breaks the hard-coded view: the meta-device estimate does not notice, a CPU forward does.
HARD_CODED = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x.reshape(2, 64, 65536).sum(dim=2)


batch_size = 2
dim = 65536 * 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

NO_SIZES = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
'''


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_size_expressions_chained_and_tuple_sizes_are_found() -> None:
    assert size_constants(MATMUL_EXPR)["N"][0] == 4096
    conv = size_constants(CONV)
    assert conv["height"][0] == conv["width"][0] == 256 and conv["batch_size"][0] == 64
    shape = size_constants(TUPLE_SHAPE)
    assert (shape["input_shape[0]"][0], shape["input_shape[1]"][0]) == (4096, 1024)
    assert size_constants("M, K = 1024, 8 * 512\n")["K"][0] == 4096


def test_chained_override_sets_one_name(tmp_path: Path) -> None:
    task = load_tasks(write(tmp_path / "conv.py", CONV), overrides={"width": 64})[0]
    sizes = size_constants(task.source)
    assert sizes["width"][0] == 64 and sizes["height"][0] == 256
    again = load_tasks(write(tmp_path / "again.py", task.source), overrides={"width": 32})[0]
    assert size_constants(again.source)["width"][0] == 32 and again.source.count("width = ") == 2


def test_batch_shrinks_first_and_channels_are_kept(tmp_path: Path) -> None:
    task = load_tasks(write(tmp_path / "conv.py", CONV), max_bytes=16 * MiB)[0]
    assert estimate_bytes(task.source) <= 16 * MiB
    assert task.size_overrides["batch_size"] == (64, 2)
    assert "in_channels" not in task.size_overrides and "out_channels" not in task.size_overrides
    assert "channel" not in task.notes


def test_expression_and_tuple_sizes_shrink(tmp_path: Path) -> None:
    matmul = load_tasks(write(tmp_path / "mm.py", MATMUL_EXPR), max_bytes=12 * MiB)[0]
    assert matmul.size_overrides == {"N": (4096, 1024)} and "N = 1024\n" in matmul.source
    shaped = load_tasks(write(tmp_path / "tanh.py", TUPLE_SHAPE), max_bytes=16 * MiB)[0]
    assert shaped.size_overrides["batch_size"] == (8, 2)
    assert shaped.size_overrides["input_shape[0]"] == (4096, 1024) and "input_shape = (1024, 1024)" in shaped.source


def test_channels_shrink_only_when_nothing_else_fits_and_it_is_noted(tmp_path: Path) -> None:
    task = load_tasks(write(tmp_path / "linear.py", LINEAR), max_bytes=8 * MiB)[0]
    assert "batch_size" not in task.size_overrides
    assert {"in_features", "out_features"} & set(task.size_overrides)
    assert "channel/feature sizes shrunk" in task.notes


def test_a_directory_loads_whole_with_failures_grouped(tmp_path: Path) -> None:
    write(tmp_path / "level1" / "1_Conv.py", CONV)
    write(tmp_path / "level1" / "2_Matmul.py", MATMUL_EXPR)
    write(tmp_path / "level1" / "3_View.py", HARD_CODED)
    write(tmp_path / "level1" / "4_Fixed.py", NO_SIZES)
    write(tmp_path / "level1" / "5_Fixed2.py", NO_SIZES.replace("x * 2", "x * 3"))
    write(tmp_path / "level1" / "6_Broken.py", "import torch\n")
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(tmp_path, max_bytes=16 * MiB)
    error = caught.value
    assert sorted(t.id for t in error.loaded) == ["level1/1_Conv", "level1/2_Matmul"]
    failed = dict(error.failures)
    assert set(failed) == {"level1/3_View", "level1/4_Fixed", "level1/5_Fixed2", "level1/6_Broken"}
    assert "no longer runs" in failed["level1/3_View"] and "RuntimeError" in failed["level1/3_View"]
    text = str(error)
    assert text.startswith("4 of 6 tasks failed:")
    assert "(2): level1/4_Fixed, level1/5_Fixed2" in text  # one group for the same problem
    assert "shrunk to fit N MiB but no longer runs (1): level1/3_View" in text


def test_an_override_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "a" / "conv.py", CONV)
    write(tmp_path / "a" / "mm.py", MATMUL_EXPR)
    assert load_tasks(tmp_path / "a", overrides={"N": 512})[1].size_overrides == {"N": (4096, 512)}
    with pytest.raises(TaskError, match="batch matches no size constant"):
        load_tasks(tmp_path / "a", overrides={"batch": 2})
