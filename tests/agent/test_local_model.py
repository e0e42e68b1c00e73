"""The local transformers policy with a tiny model built here (nothing downloaded, HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from kernelrl.agent import (
    EpisodeConfig,
    LocalPolicy,
    PromptConfig,
    TransformersGenerator,
    make_policy,
    run_episode,
)
from kernelrl.agent.policies.local import fallback_chat_format
from kernelrl.evaluate import EvalPool
from tests.agent.helpers import fenced, relu_task
from tests.evaluate import candidates as C

os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matrices: one thread is much faster than several on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
LEAN = PromptConfig(include_rules=False, system_prompt="")
ANSWER = fenced(C.GOOD, "Fused kernel:")


def build_model(directory: Path, corpus: list[str], chat_template: str | None) -> Path:
    """A byte-level BPE tokenizer trained on `corpus` and a 2-layer Llama with random weights, saved."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<unk>", "<pad>", "<eos>"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>")
    if chat_template:
        fast.chat_template = chat_template
    config = LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                         eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, bos_token_id=None)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kernelrl.agent import initial_messages

    prompt = fallback_chat_format(initial_messages(relu_task(), LEAN))
    return build_model(tmp_path_factory.mktemp("tiny-llama"), [prompt, ANSWER, C.RELU_TASK], CHAT_TEMPLATE)


def test_chat_template_and_token_usage(model_dir: Path) -> None:
    policy = make_policy("transformers", model=str(model_dir), max_tokens=12)
    assert isinstance(policy, LocalPolicy)
    messages = [{"role": "user", "content": "write a kernel"}]
    prompt = policy.generator.render(messages)
    assert prompt == "<|user|>write a kernel<|end|><|assistant|>"
    first = policy.complete(messages)
    again = policy.complete(messages)
    assert first.text == again.text  # greedy decoding is deterministic
    expected_prompt_tokens = len(policy.generator.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert first.usage.prompt_tokens == expected_prompt_tokens and first.usage.calls == 1
    assert 1 <= first.usage.completion_tokens <= 12


def test_fallback_format_without_chat_template(model_dir: Path) -> None:
    generator = TransformersGenerator.from_pretrained(str(model_dir))
    generator.tokenizer.chat_template = None
    text = generator.render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert text == "<|system|>\nS\n<|user|>\nU\n<|assistant|>\n"
    outs = generator.generate([text, text + "longer prompt"], max_new_tokens=5, temperature=1.0, seed=3)
    again = generator.generate([text, text + "longer prompt"], max_new_tokens=5, temperature=1.0, seed=3)
    assert [o.text for o in outs] == [o.text for o in again]  # seeded sampling reproduces
    assert outs[0].prompt_tokens < outs[1].prompt_tokens  # left padding is not counted


def test_random_model_gets_told_there_was_no_code(model_dir: Path, pool: EvalPool) -> None:
    policy = LocalPolicy(model=str(model_dir), max_tokens=8)
    traj = run_episode(relu_task(), policy, pool, EpisodeConfig(max_turns=2, prompt=LEAN))
    assert [t.status for t in traj.turns] == ["no_code", "no_code"]
    assert "could not find any code" in traj.turns[1].messages[-2]["content"]
    assert traj.usage.completion_tokens > 0 and traj.usage.calls == 2


def test_a_model_trained_here_writes_a_correct_kernel(model_dir: Path, pool: EvalPool) -> None:
    """Overfit the tiny model on (prompt -> ANSWER); greedy decoding must then reproduce a working kernel."""
    from kernelrl.agent import initial_messages

    generator = TransformersGenerator.from_pretrained(str(model_dir))
    tok, model = generator.tokenizer, generator.model
    prompt = generator.render(initial_messages(relu_task(), LEAN))
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    a_ids = tok(ANSWER, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([p_ids + a_ids])
    labels = ids.clone()
    labels[0, : len(p_ids)] = -100
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(250):
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.01:
            break
    model.eval()
    policy = LocalPolicy(generator=generator, max_tokens=len(a_ids) + 5, name="tiny-trained")
    traj = run_episode(relu_task(), policy, pool, EpisodeConfig(max_turns=1, prompt=LEAN))
    turn = traj.turns[0]
    assert turn.response == ANSWER and turn.usage.completion_tokens == len(a_ids)
    assert turn.status == "ok", turn.feedback


def test_concurrent_requests_are_batched(model_dir: Path) -> None:
    import threading

    policy = LocalPolicy(model=str(model_dir), max_tokens=6, max_batch=4, batch_wait_s=0.5)
    prompts = ["a", "def forward", "a", "class ModelNew"]
    outs: dict[int, object] = {}

    def ask(i: int) -> None:
        outs[i] = policy.complete([{"role": "user", "content": prompts[i]}])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(policy.batcher.batch_sizes) > 1 and sum(policy.batcher.batch_sizes) == 4
    tok = policy.generator.tokenizer
    for i, out in outs.items():
        rendered = policy.generator.render([{"role": "user", "content": prompts[i]}])
        assert out.usage.prompt_tokens == len(tok(rendered, add_special_tokens=False)["input_ids"])
    assert outs[0].text == outs[2].text
