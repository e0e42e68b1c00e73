"""Shared fixtures for trainer tests: one real evaluation pool and the smoke config."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernelrl.evaluate import EvalPool
from kernelrl.train.config import TrainConfig, load_config
from kernelrl.train.job import eval_config


@pytest.fixture(scope="session")
def smoke_cfg() -> TrainConfig:
    return load_config("smoke", overrides=["tensorboard=true"])


@pytest.fixture(scope="session")
def pool(smoke_cfg: TrainConfig) -> Iterator[EvalPool]:
    with EvalPool(1, eval_config(smoke_cfg), sandbox="none") as p:
        yield p
