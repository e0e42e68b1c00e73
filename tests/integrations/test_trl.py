"""TRL bridge: the reward function through a real service, and inside a real `GRPOTrainer` step.

The trainer test builds a tiny Llama and a word-level tokenizer locally (no downloads). One vocabulary
entry is a whole fenced candidate and the output head is biased towards it, so the policy's
completions are real code that the service evaluates.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelrl.integrations.trl import completion_text, make_reward_func
from tests.serve.helpers import CHEAP, TASK, WRONG


def fenced(code: str) -> str:
    return f"```python\n{code}```"


def test_reward_func_scores_standard_and_conversational_completions(service) -> None:
    reward = make_reward_func()
    assert reward.__name__ == "kernelrl_reward"
    completions = [fenced(CHEAP), fenced(WRONG), "no code", [{"role": "assistant", "content": fenced(CHEAP)}]]
    scores = reward(prompts=["p"] * 4, completions=completions, task_id=["relu", "relu", "relu", TASK])
    assert scores == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(KeyError, match="task_id"):
        reward(prompts=["p"], completions=[fenced(CHEAP)])
    assert completion_text([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]) == "b"


def test_reward_func_in_a_grpo_trainer_step(service, tmp_path: Path) -> None:
    trl = pytest.importorskip("trl", reason="trl is not installed")
    datasets = pytest.importorskip("datasets", reason="datasets (a trl dependency) is not installed")
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    code_token = fenced(CHEAP)
    vocab = {"<pad>": 0, "<eos>": 1, "write": 2, "kernel": 3, code_token: 4}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    config = LlamaConfig(vocab_size=5, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
                         pad_token_id=0, eos_token_id=1, bos_token_id=None)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    head = torch.nn.Linear(16, 5, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.tensor([-10.0, -10.0, -10.0, -10.0, 10.0]))
    model.lm_head = head

    seen: list[list[float]] = []
    inner = make_reward_func()

    def kernel_reward(prompts, completions, **kwargs):
        scores = inner(prompts, completions, **kwargs)
        seen.append(scores)
        return scores

    dataset = datasets.Dataset.from_dict({"prompt": ["write kernel"] * 4, "task_id": ["relu"] * 4})
    args = trl.GRPOConfig(output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=2, num_generations=2,
                          max_completion_length=1, max_steps=1, use_cpu=True, report_to="none", save_strategy="no",
                          logging_steps=1, bf16=False, seed=0, dataloader_num_workers=0)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[kernel_reward], args=args, train_dataset=dataset,
                              processing_class=tokenizer)
    trainer.train()
    assert seen and all(scores == [1.0] * len(scores) for scores in seen)
    rewards = [log["reward"] for log in trainer.state.log_history if "reward" in log]
    assert rewards and float(rewards[0]) == 1.0
