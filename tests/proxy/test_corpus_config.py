"""Corpus discovery and file-level split; config presets, files and overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelrl.proxy.config import PRESETS, build_config, parse_override
from kernelrl.proxy.corpus import CorpusConfig, chunk_document, discover_files, load_corpus


def test_chunks_are_bounded_line_aligned_and_lossless() -> None:
    data = b"".join(f"line {i} {'x' * (i % 40)}\n".encode() for i in range(200)) + b"y" * 300
    chunks = chunk_document(data, 100)
    assert b"".join(chunks) == data
    assert all(0 < len(c) <= 100 for c in chunks)
    assert all(c.endswith(b"\n") for c in chunks[:-4])


def test_stdlib_and_project_files_are_found_without_site_packages() -> None:
    names = [n for n, _ in discover_files(CorpusConfig())]
    assert "stdlib/json/decoder.py" in names
    assert "kernelrl/proxy/corpus.py" in names
    assert not any("site-packages" in n for n in names)


def test_split_is_by_file_deterministic_and_capped() -> None:
    cfg = CorpusConfig(max_train_bytes=150_000, max_val_bytes=30_000, chunk_bytes=256)
    a, b, c = load_corpus(cfg, seed=1), load_corpus(cfg, seed=1), load_corpus(cfg, seed=2)
    assert a.train_files == b.train_files and a.val_docs == b.val_docs
    assert a.train_files != c.train_files
    assert not set(a.train_files) & set(a.val_files)
    assert sum(map(len, a.train_docs)) <= cfg.max_train_bytes
    assert sum(map(len, a.val_docs)) <= cfg.max_val_bytes
    assert all(len(d) <= 256 for d in a.train_docs + a.val_docs)


def test_empty_corpus_is_a_clear_error(tmp_path: Path) -> None:
    cfg = CorpusConfig(sources=[], extra_paths=[str(tmp_path)])
    with pytest.raises(ValueError, match=r"empty corpus: no \.py files"):
        load_corpus(cfg, seed=0)
    (tmp_path / "only.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match=r"empty corpus: the (train|val) split got no files"):
        load_corpus(cfg, seed=0)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_corpus(CorpusConfig(sources=[], extra_paths=[str(tmp_path / "nope")]), seed=0)


def test_presets_validate_and_overrides_apply(tmp_path: Path) -> None:
    for name in PRESETS:
        assert build_config(name).preset == name
    cfg = build_config("smoke", overrides=["train.lr=0.005", "arms=[bytes, gzip]", "mix.p_compressed=0.5"])
    assert cfg.train.lr == 0.005 and cfg.arms == ["bytes", "gzip"] and cfg.mix.p_compressed == 0.5
    flops = build_config("smoke", overrides=["train.budget_flops=1e9"]).train
    assert flops.budget_flops == 1e9 and flops.budget_tokens is None
    path = tmp_path / "c.yaml"
    path.write_text("seed: 7\ntokenizer:\n  vocab_size: 400\n")
    cfg = build_config("smoke", path)
    assert cfg.seed == 7 and cfg.tokenizer.vocab_size == 400 and cfg.options_for("bpe") is cfg.tokenizer
    assert build_config(cfg.preset, overrides=[]).model_dump() != cfg.model_dump()
    assert parse_override("a.b.c=[1, 2]") == {"a": {"b": {"c": [1, 2]}}}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["arms=[bytes, zstd]"], "unknown compressor 'zstd'"),
        (["arms=[]"], "arms: is empty"),
        (["train.seq_len=128"], "max_len=64 < train.seq_len=128"),
        (["mix.p_compressed=1.5"], "p_compressed"),
        (["nonsense=1"], "nonsense"),
    ],
)
def test_bad_config_names_the_problem(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_config("smoke", overrides=overrides)
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        build_config("huge")
    with pytest.raises(ValueError, match="not of the form"):
        parse_override("novalue")
