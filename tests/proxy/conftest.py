"""Shared fixtures: real standard-library code as test text."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
import torch

STDLIB = Path(sysconfig.get_paths()["stdlib"])


# The tensors here are tiny; one thread avoids slow oversubscription on a shared 2-core machine.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def code_docs() -> list[bytes]:
    """Real Python source, cut into 200-byte documents (about 40 KB)."""
    from kernelrl.proxy.corpus import chunk_document

    docs: list[bytes] = []
    for name in ("json/decoder.py", "json/encoder.py", "textwrap.py", "shlex.py", "fnmatch.py", "bisect.py"):
        docs += chunk_document((STDLIB / name).read_bytes(), 200)
    return docs


@pytest.fixture(scope="session")
def trained_arith(code_docs: list[bytes]):
    """An arith compressor whose M1 is trained briefly on `code_docs`."""
    from kernelrl.proxy.compressors import make_compressor

    comp = make_compressor(
        "arith",
        {"window_bits": 48, "max_window_bytes": 31, "d_model": 32, "n_layers": 1, "n_heads": 2,
         "train_steps": 80, "batch_size": 32, "lr": 1e-2},
    )
    info = comp.fit(code_docs, seed=0)
    return comp, info
