"""Sentinels, id layout, per-document view choice, translation warm-up, packing."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kernelrl.proxy.mixing import (
    COMP_CLOSE,
    COMP_OPEN,
    RAW_CLOSE,
    RAW_OPEN,
    MixConfig,
    MixedStream,
    make_layout,
    pack_eval,
    wrap_compressed,
    wrap_raw,
)


def docs_and_views(n: int = 400) -> tuple[list[bytes], list[np.ndarray]]:
    """Documents `doc 17\n...` and fake-but-deterministic compressed views (ids 0..299)."""
    raw = [f"doc {i}\n".encode() * (1 + i % 3) for i in range(n)]
    comp = [np.array([i % 300, (i * 7) % 300], dtype=np.int64) for i in range(n)]
    return raw, comp


def test_sentinels_wrap_each_view() -> None:
    ids, is_raw = wrap_raw(b"ab")
    assert ids.tolist() == [RAW_OPEN, ord("a"), ord("b"), RAW_CLOSE]
    assert is_raw.tolist() == [False, True, True, False]
    layout = make_layout(300, "auto")
    ids, is_raw = wrap_compressed(np.array([0, 299]), layout)
    assert ids.tolist() == [COMP_OPEN, 260, 260 + 299, COMP_CLOSE]
    assert not is_raw.any()
    with pytest.raises(ValueError, match="out of range"):
        wrap_compressed(np.array([300]), layout)


def test_layout_separates_embeddings_only_beyond_256_symbols() -> None:
    shared = make_layout(256, "auto")
    assert not shared.separate and shared.offset == 0 and shared.vocab_size == 260
    separate = make_layout(1024, "auto")
    assert separate.separate and separate.offset == 260 and separate.vocab_size == 260 + 1024
    assert make_layout(256, "separate").vocab_size == 260 + 256
    with pytest.raises(ValueError, match="cannot share the 256 byte embeddings"):
        make_layout(1024, "shared")


def test_translation_probability_ramps_down() -> None:
    mix = MixConfig(translation_start=0.4, translation_until=0.5)
    assert mix.translation_prob(0.0) == pytest.approx(0.4)
    assert mix.translation_prob(0.25) == pytest.approx(0.2)
    assert mix.translation_prob(0.5) == 0.0 and mix.translation_prob(0.9) == 0.0
    assert MixConfig(translation_until=0.0).translation_prob(0.0) == 0.0


def test_bernoulli_view_choice_matches_p_and_is_reproducible() -> None:
    raw, comp = docs_and_views(2000)
    layout = make_layout(300, "auto")
    mix = MixConfig(p_compressed=0.9, translation_start=0.0)
    stream = MixedStream(raw, comp, layout, mix, seed=3)
    views = [stream.choose_view(progress=0.5) for _ in range(4000)]
    frac = views.count("compressed") / len(views)
    assert 0.88 < frac < 0.92 and "pair" not in views
    a = MixedStream(raw, comp, layout, mix, seed=5).next_batch(4, 32, 0.5)
    b = MixedStream(raw, comp, layout, mix, seed=5).next_batch(4, 32, 0.5)
    c = MixedStream(raw, comp, layout, mix, seed=6).next_batch(4, 32, 0.5)
    assert (a[0] == b[0]).all() and not (a[0] == c[0]).all()
    always_raw = MixedStream(raw, comp, layout, MixConfig(p_compressed=0.0, translation_start=0.0), seed=0)
    ids, _is_raw = always_raw.next_batch(2, 64, 0.0)
    assert (ids < 258).all() and always_raw.stats.compressed_docs == 0


def test_translation_pairs_hold_both_views_of_one_document_in_random_order() -> None:
    raw, comp = docs_and_views(50)
    layout = make_layout(300, "auto")
    stream = MixedStream(raw, comp, layout, MixConfig(translation_start=1.0, translation_until=0.5), seed=0)
    orders = set()
    for i in range(40):
        assert stream.choose_view(progress=0.0) == "pair"
        ids, is_raw = stream.render(i, "pair")
        text = bytes(ids[is_raw].astype(np.uint8).tolist())
        assert text == raw[i]
        symbols = ids[(ids >= layout.offset) & ~is_raw] - layout.offset
        assert symbols.tolist() == comp[i].tolist()
        orders.add(int(ids[0]))
    assert orders == {RAW_OPEN, COMP_OPEN}
    late = [stream.choose_view(progress=0.6) for _ in range(200)]
    assert "pair" not in late


def test_baseline_stream_is_raw_only_and_packs_without_gaps() -> None:
    raw, _ = docs_and_views(30)
    stream = MixedStream(raw, None, make_layout(0, "auto"), MixConfig(), seed=1)
    rows = [stream.next_batch(2, 15, 0.0) for _ in range(5)]
    flat = np.concatenate([r[0].reshape(-1).numpy() for r in rows])
    assert set(np.unique(flat).tolist()) <= set(range(258))
    # The packed stream is whole documents back to back: sentinels alternate open/close.
    marks = flat[(flat == RAW_OPEN) | (flat == RAW_CLOSE)].tolist()
    assert all(a != b for a, b in itertools.pairwise(marks))
    assert stream.stats.raw_docs > 0 and stream.stats.compressed_docs == 0
    with pytest.raises(ValueError, match="empty corpus"):
        MixedStream([], None, make_layout(0, "auto"), MixConfig())


def test_pack_eval_scores_every_byte_once() -> None:
    docs = [b"hello world\n", b"x = 1\n", b"def f():\n    return 2\n"]
    ids, is_raw = pack_eval(docs, seq_len=8)
    stream = np.concatenate([wrap_raw(d)[0] for d in docs])
    assert ids.shape[1] == 9
    targets = ids[:, 1:].reshape(-1).numpy()
    assert targets.tolist() == stream[1 : 1 + targets.size].tolist()
    assert int(is_raw[:, 1:].sum()) == sum(stream[1 : 1 + targets.size] < 256)
    with pytest.raises(ValueError, match="shorter than one sequence"):
        pack_eval([b"ab"], seq_len=64)
