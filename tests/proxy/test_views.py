"""Preparing an arm's compressed view from the configured corpus."""

from __future__ import annotations

import numpy as np
import pytest

from kernelrl.proxy.config import build_config
from kernelrl.proxy.corpus import load_corpus
from kernelrl.proxy.experiment import prepare_view


@pytest.fixture(scope="module")
def smoke():
    cfg = build_config("smoke")
    return cfg, load_corpus(cfg.corpus, cfg.seed)


def test_tokenizer_ids_get_their_own_embeddings_by_default(smoke) -> None:
    cfg, corpus = smoke
    view = prepare_view("tokenizer", cfg, corpus)
    assert view.layout.separate and view.layout.vocab_size == 260 + view.info["symbol_vocab"]
    assert view.info["view"] == "ids (separate embeddings)" and view.info["roundtrip_ok"]
    assert max(int(s.max()) for s in view.symbols if len(s)) >= 256
    assert view.info["serialised_bytes_per_raw_byte"] == pytest.approx(2 * view.info["symbols_per_raw_byte"])


def test_shared_embeddings_read_the_two_byte_serialisation(smoke) -> None:
    cfg, corpus = smoke
    ids_view = prepare_view("tokenizer", cfg, corpus)
    shared = cfg.model_copy(update={"embeddings": "shared"})
    view = prepare_view("tokenizer", shared, corpus)
    assert not view.layout.separate and view.layout.vocab_size == 260
    assert view.info["view"] == "serialised bytes"
    assert all(len(b) == 2 * len(a) for a, b in zip(ids_view.symbols, view.symbols, strict=True))
    first = view.symbols[0]
    assert (first[0::2] * 256 + first[1::2]).tolist() == ids_view.symbols[0].tolist()
    assert all(np.all(s < 256) for s in view.symbols)
