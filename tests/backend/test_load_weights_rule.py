"""The service's rule for LoadWeights (docs/backend.md "Deviations"): a load is permitted only as a
training model's first request. After the model has trained or saved, ``load_state`` /
``load_state_with_optimizer`` is refused with a 400 naming the rule (the SDK raises
``tinker.BadRequestError``); loading into a fresh client (what ``create_training_client_from_state*``
does) keeps working and restores the saved weights."""

from __future__ import annotations

import warnings

import pytest
import tinker
from tinker import types

PROMPT = [5, 6, 7, 8, 9, 10, 11, 12]


def _datum() -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(PROMPT[:-1]),
                       loss_fn_inputs={"target_tokens": PROMPT[1:], "weights": [1.0] * (len(PROMPT) - 1)})


def _step(tc) -> None:
    tc.forward_backward([_datum()], "cross_entropy").result(timeout=120)
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=120)


def _logprobs(tc) -> list[float]:
    out = tc.forward([_datum()], "cross_entropy").result(timeout=120)
    return out.loss_fn_outputs[0]["logprobs"].tolist()


def test_load_state_after_training_is_refused_fresh_clients_load(backend):
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    tc = sc.create_lora_training_client(base_model=backend.model, rank=4, seed=0)
    _step(tc)
    path = tc.save_state("rule-0").result(timeout=120).path
    want = _logprobs(tc)
    warnings.simplefilter("ignore", FutureWarning)
    for load in (tc.load_state, tc.load_state_with_optimizer):
        with pytest.raises(tinker.BadRequestError, match="LoadWeights is not permitted"):
            load(path).result(timeout=60)
    # only saved (not trained) counts too: the rule is "first request"
    saved_only = sc.create_lora_training_client(base_model=backend.model, rank=4, seed=1)
    saved_only.save_weights_for_sampler("rule-untrained").result(timeout=120)
    with pytest.raises(tinker.BadRequestError, match="LoadWeights is not permitted"):
        saved_only.load_state(path).result(timeout=60)
    # a fresh client's first request may load; then it trains on as usual
    fresh = sc.create_lora_training_client(base_model=backend.model, rank=4, seed=2)
    fresh.load_state_with_optimizer(path).result(timeout=120)
    assert _logprobs(fresh) == pytest.approx(want, abs=1e-5)
    _step(fresh)
    for resumed in (sc.create_training_client_from_state(path),
                    sc.create_training_client_from_state_with_optimizer(path)):
        assert _logprobs(resumed) == pytest.approx(want, abs=1e-5)
        _step(resumed)
