"""`model.name` as a local Hugging Face checkpoint: the path the GPU presets take, run on a CPU."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from kernelrl.evaluate import EvalPool
from kernelrl.generation.tiny import build_tiny_tokenizer
from kernelrl.train.config import TrainConfig
from kernelrl.train.job import run_train
from kernelrl.train.model import build_model, encode_prompt
from kernelrl.train.task_family import make_family


def _save_qwen_like(directory: Path, corpus: list[str]) -> None:
    """A tiny Qwen2 and a tokenizer that, like Qwen's, has no BOS token."""
    base = build_tiny_tokenizer(corpus, vocab_size=320)
    tok = PreTrainedTokenizerFast(tokenizer_object=base.backend_tokenizer, eos_token=base.eos_token)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=192,
                         eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    config.save_pretrained(directory)  # the model type decides which tokenizer class loads it
    tok.save_pretrained(directory)
    tok = AutoTokenizer.from_pretrained(directory)  # as the trainer will load it (Qwen's adds a pad token)
    assert tok.bos_token_id is None
    config.vocab_size = len(tok)
    Qwen2ForCausalLM(config).save_pretrained(directory)


def test_a_local_checkpoint_trains(tmp_path: Path, smoke_cfg: TrainConfig, pool: EvalPool) -> None:
    cfg = smoke_cfg.model_copy(deep=True)
    family = make_family(cfg.task, cfg.seed)
    _save_qwen_like(tmp_path / "ckpt", family.tokenizer_corpus())
    cfg.model.name = str(tmp_path / "ckpt")
    model, tok = build_model(cfg.model, [], cfg.seed)
    assert type(model).__name__ == "Qwen2ForCausalLM" and tok.pad_token_id is not None and tok.bos_token_id is None
    ids = encode_prompt(tok, "y = relu(x)")
    assert None not in ids and ids == tok.encode("y = relu(x)", add_special_tokens=False)
    cfg.rl.steps = 1
    summary = run_train(cfg, run_dir=tmp_path / "run", echo=False, pool=pool)
    assert 0.0 <= summary["after_rl"]["pass_rate"] <= 1.0
    assert (tmp_path / "run" / "policy.safetensors").is_file()
