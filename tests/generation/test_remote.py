import socket
import time

import pytest

from kernelrl.generation import (
    Engine,
    GenerationRequest,
    Generator,
    OpenAICompletionsClient,
    RemoteGenerationError,
    SamplingParams,
    StepGenerator,
)

from .helpers import PROMPTS, encode
from .openai_server import CompletionServer


@pytest.fixture(scope="module")
def server(llama, tokenizer):
    with CompletionServer(Engine(llama, tokenizer)) as srv:
        yield srv


def reqs(tokenizer, logprobs=0):
    return [
        GenerationRequest(
            encode(tokenizer, PROMPTS[i]),
            SamplingParams(temperature=0.9, top_k=30, max_new_tokens=6 + 3 * i, seed=i, logprobs=logprobs,
                           stop_token_ids=(2,), ignore_eos=True),
            f"r{i}",
            "g",
        )
        for i in range(4)
    ]


@pytest.mark.parametrize("prefix", ["", "/legacy"])
def test_client_returns_what_the_engine_generates(server, llama, tokenizer, prefix):
    rs = reqs(tokenizer, logprobs=2)
    expected = Engine(llama, tokenizer).generate(rs)
    with OpenAICompletionsClient(server.url + prefix, "tiny", max_concurrency=3, policy_version=4) as client:
        got = client.generate(rs)
    for e, g in zip(expected, got, strict=True):
        assert (g.request_id, g.group_id, g.prompt_token_ids) == (e.request_id, "g", e.prompt_token_ids)
        assert g.token_ids == e.token_ids
        assert g.logprobs == pytest.approx(e.logprobs, abs=1e-4)  # server runs one at a time
        assert g.finish_reason == e.finish_reason
        assert g.top_token_ids == e.top_token_ids
        assert g.policy_versions == [4] * len(g.token_ids)
        assert g.text == e.text


def test_request_body_carries_token_ids_and_sampling(server, tokenizer):
    r = reqs(tokenizer)[1]
    r = GenerationRequest(r.prompt_token_ids, r.params.replace(stop_strings=("}",)), "x")
    with OpenAICompletionsClient(server.url, "tiny-model") as client:
        res = client.generate([r])[0]
    body = server.bodies[-1]
    assert body["prompt"] == list(r.prompt_token_ids) and body["model"] == "tiny-model"
    assert (body["max_tokens"], body["temperature"], body["top_k"], body["seed"]) == (9, 0.9, 30, 1)
    assert body["stop"] == ["}"] and body["stop_token_ids"] == [2] and body["logprobs"] == 1
    assert body["return_tokens_as_token_ids"] is True
    assert res.top_token_ids is None  # logprobs=0: only the sampled tokens' log-probs


def test_timeout_is_reported_and_does_not_hang(server, tokenizer):
    client = OpenAICompletionsClient(server.url + "/slow", "tiny", timeout_s=0.3)
    start = time.monotonic()
    with pytest.raises(RemoteGenerationError, match=r"timed out after 0\.3 s"):
        client.generate(reqs(tokenizer)[:2])
    assert time.monotonic() - start < 3


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("/garbage", "malformed JSON"),
        ("/error", "HTTP 500"),
        ("/nologprobs", "no logprobs"),
        ("/badtokens", "token_id:<id>"),
        ("/nowhere", "HTTP 404"),
    ],
)
def test_bad_answers_give_clear_errors(server, tokenizer, prefix, message):
    with OpenAICompletionsClient(server.url + prefix, "tiny", timeout_s=5) as client, \
            pytest.raises(RemoteGenerationError, match=message):
        client.generate(reqs(tokenizer)[:1])


def test_unreachable_server_fails_fast(tokenizer):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with OpenAICompletionsClient(f"http://127.0.0.1:{port}", "tiny", timeout_s=2) as client, \
            pytest.raises(RemoteGenerationError, match="failed"):
        client.generate(reqs(tokenizer)[:1])


def test_engine_and_client_share_the_interface(llama):
    client = OpenAICompletionsClient("http://127.0.0.1:9", "tiny")
    engine = Engine(llama)
    assert isinstance(client, Generator) and isinstance(engine, Generator)
    assert isinstance(engine, StepGenerator) and not isinstance(client, StepGenerator)
    with pytest.raises(ValueError, match="timeout_s"):
        OpenAICompletionsClient("http://x", "m", timeout_s=0)
