"""`kernelrl repro proxy` (issue 19): the tokenizer-only BPB conversion by hand, and the smoke repro end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from kernelrl.cli import main
from kernelrl.proxy.compressors import make_compressor
from kernelrl.proxy.evaluate import evaluate_symbol_bpb
from kernelrl.proxy.mixing import make_layout, pack_eval, pack_eval_symbols, wrap_raw
from kernelrl.proxy.model import LMOutput
from kernelrl.repro.proxy import repro_config, trend
from kernelrl.repro.record import missing_keys


class Uniform(nn.Module):
    """Equal logits over a `vocab`-id vocabulary: every id costs log2(vocab) bits."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, ids: torch.Tensor) -> LMOutput:
        return LMOutput(torch.zeros(*ids.shape, self.vocab), None)


def test_tokenizer_only_bpb_is_token_bits_over_raw_bytes(code_docs: list[bytes]) -> None:
    tok = make_compressor("tokenizer", {"vocab_size": 300})
    tok.fit(code_docs[:100])
    val = code_docs[150:160]
    symbols = tok.symbols_many(val)
    layout = make_layout(tok.symbol_vocab, "auto")
    ids, counted = pack_eval_symbols(symbols, layout, seq_len=37)  # 37: the last row is padded
    n_tokens, n_bytes = sum(map(len, symbols)), sum(map(len, val))
    assert int(counted[:, 1:].sum()) == n_tokens  # every token once, no sentinel, no padding
    assert n_tokens < n_bytes  # the tokenizer compresses: the two counts differ
    bpb = evaluate_symbol_bpb(Uniform(layout.vocab_size), ids, counted, n_bytes, batch_size=3)
    # A uniform model over 260 + 300 ids: log2(560) bits per token, spread over the raw bytes.
    assert bpb == pytest.approx(n_tokens * math.log2(560) / n_bytes, rel=1e-12)
    with pytest.raises(ValueError, match="raw_bytes must be positive"):
        evaluate_symbol_bpb(Uniform(layout.vocab_size), ids, counted, 0)


def test_padded_raw_eval_scores_every_byte_once() -> None:
    docs = [b"hello world\n", b"x = 1\n", b"def f():\n    return 2\n"]
    ids, is_raw = pack_eval(docs, seq_len=8, pad_tail=True)
    assert int(is_raw[:, 1:].sum()) == sum(map(len, docs))
    stream = torch.cat([torch.from_numpy(wrap_raw(d)[0]) for d in docs])
    assert ids[:, 1:].reshape(-1)[: len(stream) - 1].tolist() == stream[1:].tolist()  # the tail is kept
    with pytest.raises(ValueError, match="empty corpus"):
        pack_eval_symbols([], make_layout(0, "auto"), 8)


def test_trend_reads_the_direction_of_a_gap() -> None:
    t = trend([1e3, 1e4, 1e5], [0.3, 0.2, -0.1])
    assert t["favours_arm_as_size_grows"] and t["monotone"] and t["better_than_bytes_at"] == [2]
    assert t["slope_per_decade"] == pytest.approx(-0.2) and t["change"] == pytest.approx(-0.4)
    assert not trend([1e3, 1e4], [0.1, 0.2])["favours_arm_as_size_grows"]


def test_bad_repro_config_names_the_problem() -> None:
    with pytest.raises(ValueError, match="must include the byte-only arm"):
        repro_config(True, ["arms=[gzip]"])
    with pytest.raises(ValueError, match="sizes: has duplicates"):
        repro_config(True, ["sizes=[{d_model: 16, n_layers: 1, n_heads: 2}, {d_model: 16, n_layers: 1, n_heads: 2}]"])
    with pytest.raises(ValueError, match="even size"):
        repro_config(True, ["sizes=[{d_model: 16, n_layers: 1, n_heads: 3}]"])


def test_smoke_repro_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["repro", "proxy", "--smoke", "--out", str(out)]) == 0
    r = json.loads((out / "results.json").read_text())
    assert r["repro"] == "proxy" and not missing_keys(r)  # revision, config, seed, wall time
    assert len(r["sizes"]) >= 3 and "tokenizer-only" in r["arms"] and "bytes" in r["arms"]
    params = [s["non_embedding_params"] for s in r["sizes"]]
    assert params == sorted(params) and len(set(params)) == len(params)
    # The tokenizer's bigger head buys fewer steps at equal FLOPs: those arms also train at byte-only's steps.
    assert r["equal_step_arms"] == ["tokenizer", "tokenizer-only"] and r["seed_list"] == [0, 1]
    for d in r["seeds"].values():
        for i, size in enumerate(d["sizes"]):
            arms = {a["name"]: a for a in size["arms"]}
            assert list(arms) == r["arms"]
            for name, arm in arms.items():
                assert math.isfinite(arm["final_bpb"]) and arm["final_bpb"] == d["bpb"][name][i]
                if name.endswith(" @steps"):
                    assert arm["steps"] == arms["bytes"]["steps"]
                else:
                    assert size["budget_flops"] - arm["flops"] / arm["steps"] < arm["flops"] <= size["budget_flops"]
                if name != "bytes":
                    assert d["gaps"][name][i] == pytest.approx(arm["final_bpb"] - arms["bytes"]["final_bpb"])
            assert arms["tokenizer-only"]["mix"]["raw_tokens"] == 0  # never sees a raw byte
            assert arms["tokenizer-only"]["mix"]["compressed_docs"] > 0 and arms["bytes"]["mix"]["compressed_docs"] == 0
            assert arms["tokenizer"]["steps"] < arms["bytes"]["steps"]
    # Seeds differ (their own initialisation), and the tables are their means; the comparisons are paired over them.
    assert r["seeds"]["0"]["bpb"]["bytes"] != r["seeds"]["1"]["bpb"]["bytes"]
    assert r["bpb"]["gzip"][0] == pytest.approx((r["seeds"]["0"]["bpb"]["gzip"][0] + r["seeds"]["1"]["bpb"]["gzip"][0]) / 2)
    c = r["comparisons"]["tokenizer: gain grows"]
    assert c["n"] == 2 and c["diffs"][0] == pytest.approx(r["seeds"]["0"]["gaps"]["tokenizer"][0]
                                                         - r["seeds"]["0"]["gaps"]["tokenizer"][-1])
    assert "tokenizer-only @steps: gain grows" not in r["comparisons"] and "tokenizer @steps vs tokenizer-only" in r["comparisons"]
    report = (out / "report.md").read_text()
    assert f"{r['bpb']['tokenizer-only'][-1]:.4f}" in report and "Equal compute" in report
    assert "as the model grows" in report and "proxy.png" in report and "Paired over seeds" in report
    assert (out / "proxy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (out / "report.md").unlink()
    assert main(["repro", "proxy", "--out", str(out), "--report-only"]) == 0
    assert (out / "report.md").read_text() == report
    assert main(["repro", "proxy", "--smoke", "--set", "sizes=[]", "--out", str(out)]) == 2
    assert "sizes" in capsys.readouterr().err
