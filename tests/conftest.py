"""Shared fixtures: an isolated build cache for every test session."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Builds go to a fresh cache, so tests prove real compiles (workers inherit the variable)."""
    path = str(tmp_path_factory.mktemp("kernelrl-cache"))
    os.environ["KERNELRL_CACHE_DIR"] = path
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return path
