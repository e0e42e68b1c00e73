import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernelrl.generation import GenerationRequest, GenerationResult, SamplingParams


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_p", -1),
        ("top_k", -1),
        ("top_k", 2.5),
        ("max_new_tokens", 0),
        ("max_new_tokens", -3),
        ("stop_token_ids", (-1,)),
        ("stop_strings", ("",)),
        ("seed", "x"),
        ("logprobs", -1),
        ("ignore_eos", "yes"),
    ],
)
def test_invalid_sampling_params_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"SamplingParams\.{field}"):
        SamplingParams(**{field: value})


def test_bad_requests_are_rejected_clearly():
    with pytest.raises(ValueError, match="prompt_token_ids is empty"):
        GenerationRequest([], request_id="r1")
    with pytest.raises(ValueError, match="prompt_token_ids"):
        GenerationRequest([1, -2], request_id="r1")
    with pytest.raises(TypeError, match="SamplingParams"):
        GenerationRequest([1], params={"temperature": 1.0})  # type: ignore[arg-type]


def test_result_lengths_must_agree():
    with pytest.raises(ValueError, match="same length"):
        GenerationResult("r", [1], token_ids=[1, 2], logprobs=[-1.0], policy_versions=[0, 0])
    with pytest.raises(ValueError, match="finish_reason"):
        GenerationResult("r", [1], finish_reason="done")  # type: ignore[arg-type]


params_strategy = st.builds(
    SamplingParams,
    temperature=st.floats(0, 5),
    top_p=st.floats(0.01, 1),
    top_k=st.integers(0, 100),
    max_new_tokens=st.integers(1, 4096),
    stop_token_ids=st.lists(st.integers(0, 1000), max_size=3),
    stop_strings=st.lists(st.text(min_size=1, max_size=5), max_size=3),
    ignore_eos=st.booleans(),
    seed=st.none() | st.integers(0, 2**63 - 1),
    logprobs=st.integers(0, 20),
)


@given(params_strategy, st.lists(st.integers(0, 50000), min_size=1, max_size=20))
def test_records_round_trip_through_json(params, prompt):
    req = GenerationRequest(prompt, params, request_id="g/0", group_id="g")
    assert GenerationRequest.from_dict(json.loads(json.dumps(req.to_dict()))) == req
    res = GenerationResult(
        "g/0", list(prompt), token_ids=[3, 4], logprobs=[-0.5, -1.25], policy_versions=[0, 1],
        finish_reason="stop", group_id="g", top_token_ids=[[3], [4, 5]], top_logprobs=[[-0.5], [-1.25, -2.0]],
        stop_reason="</s>", text="ab", rng_state="AAAA",
    )
    assert GenerationResult.from_dict(json.loads(json.dumps(res.to_dict()))) == res
