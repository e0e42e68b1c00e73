"""Shapes met in a real KernelBench checkout (issue 15's measurement, bench/bench_kernelbench_load.py):
inputs hard-coded to CUDA, a batch that must equal a feature size, hidden sizes given as a list, channel
counts whose names do not say so, sizes that take no memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelrl.tasks import TaskLoadError, estimate_bytes, load_tasks, size_constants

MiB = 2**20

ON_CUDA = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


rows = 1024


def get_inputs():
    return [torch.rand(rows, rows, device="cuda"), torch.rand(rows, rows, device="cuda")]


def get_init_inputs():
    return []
'''

SMALL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.rand(8, 8)]


def get_init_inputs():
    return []
'''

# The per-row labels broadcast against the last dimension: it runs only while batch_size == row_shape[0].
TIED = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, scores, labels):
        return torch.relu(1 - scores * labels).mean()


batch_size = 4096
row_shape = (4096,)


def get_inputs():
    return [torch.rand(batch_size, *row_shape), torch.rand(batch_size) * 2 - 1]


def get_init_inputs():
    return []
'''

LIST_SIZES = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_size, widths, out_size):
        super().__init__()
        layers, last = [], in_size
        for width in widths:
            layers += [nn.Linear(last, width), nn.ReLU()]
            last = width
        self.net = nn.Sequential(*layers, nn.Linear(last, out_size))

    def forward(self, x):
        return self.net(x)


batch_size = 64
in_size = 256
widths = [4096, 4096]
out_size = 128


def get_inputs():
    return [torch.rand(batch_size, in_size)]


def get_init_inputs():
    return [in_size, widths, out_size]
'''


# `wide` is a channel count only by role (the model is built from it); `spare` takes no memory at all.
BUILT_FROM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, wide):
        super().__init__()
        self.conv = nn.Conv2d(3, wide, 3)

    def forward(self, x):
        height, width = x.shape[-2:]  # the method's own names, not the module's sizes
        return self.conv(x)[:, :, : height - 2, : width - 2]


batch_size = 10
wide = 192
height = width = 256
spare = 4096


def get_inputs():
    return [torch.rand(batch_size, 3, height, width)]


def get_init_inputs():
    return [wide]
'''


def _write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (directory / name).write_text(source)
    return directory


def test_estimate_of_cuda_inputs_allocates_nothing() -> None:
    assert estimate_bytes(ON_CUDA) == 3 * 1024 * 1024 * 4  # two inputs and the output, all on meta


@pytest.mark.skipif(torch.cuda.is_available(), reason="the task runs where CUDA exists")
def test_cuda_only_task_fails_alone_with_the_reason(tmp_path: Path) -> None:
    level = _write(tmp_path / "level1", {"1_on_cuda.py": ON_CUDA, "2_small.py": SMALL})
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(level, max_bytes=8 * MiB)  # one halving, then the forward on the CPU fails
    assert [t.id for t in caught.value.loaded] == ["level1/2_small"]
    [(task_id, message)] = caught.value.failures
    assert task_id == "level1/1_on_cuda" and "CUDA device" in message and "device='cuda'" in message


def test_batch_tied_to_a_feature_size_shrinks_with_it(tmp_path: Path) -> None:
    level = _write(tmp_path / "level1", {"1_tied.py": TIED})
    [task] = load_tasks(level, max_bytes=1 * MiB)
    sizes = size_constants(task.source)
    assert sizes["batch_size"][0] == sizes["row_shape[0]"][0] < 4096
    assert estimate_bytes(task.source) <= 1 * MiB


def test_list_of_hidden_sizes_is_shrunk(tmp_path: Path) -> None:
    assert size_constants(LIST_SIZES)["widths[1]"][0] == 4096
    level = _write(tmp_path / "level3", {"1_list_sizes.py": LIST_SIZES})
    [task] = load_tasks(level, max_bytes=16 * MiB)
    assert task.size_overrides["batch_size"] == (64, 2)
    assert {n for n in task.size_overrides} >= {"widths[0]", "widths[1]"}
    assert estimate_bytes(task.source) <= 16 * MiB


def test_sizes_the_model_is_built_from_are_kept_and_idle_sizes_left_alone(tmp_path: Path) -> None:
    level = _write(tmp_path / "level3", {"1_built_from.py": BUILT_FROM})
    [task] = load_tasks(level, max_bytes=8 * MiB)
    assert set(task.size_overrides) == {"batch_size", "height", "width"}  # not wide, not spare
    assert task.size_overrides["batch_size"] == (10, 2)  # 10 -> 5 -> 3 -> 2: down to 2, not stuck at 3
