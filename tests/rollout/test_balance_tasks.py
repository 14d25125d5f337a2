"""sft --balance-tasks: each gold datum's loss weight from its last measured sequence NLL."""

from __future__ import annotations

import numpy as np
import pytest
from tinker import types

from cookbook.data import reweighted
from cookbook.recipes.sft import balance_weights


def test_weights_follow_nll_relative_to_the_batch_mean():
    nll = {"0": 1.0, "1": 3.0, "2": 2.0}
    assert balance_weights(nll, [0, 1, 2], 1.0) == pytest.approx([0.5, 1.5, 1.0])
    assert balance_weights(nll, [0, 1], 1.0) == pytest.approx([0.5, 1.5])          # the mean of this batch
    assert balance_weights(nll, [0, 1, 2], 0.5) == pytest.approx([0.5 ** 0.5, 1.5 ** 0.5, 1.0])
    assert balance_weights(nll, [0, 1, 2], 0.0) == [1.0, 1.0, 1.0]                 # plain SFT
    assert balance_weights(nll, [0, 7], 1.0) == pytest.approx([1.0, 1.0])          # 7 not measured yet: 1
    assert balance_weights({}, [0, 1], 1.0) == [1.0, 1.0]


def test_weights_are_clipped():
    nll = {"0": 0.01, "1": 10.0}
    w = balance_weights(nll, [0, 1], 3.0)
    assert w == [0.25, 4.0]


def test_reweighted_datum_scales_weights_and_keeps_the_rest():
    d = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]),
                    loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.array([2, 3, 4], dtype=np.int64)),
                                    "weights": types.TensorData.from_numpy(np.array([0, 1, 1], dtype=np.float32))})
    assert reweighted(d, 1.0) is d
    r = reweighted(d, 2.5)
    assert r.loss_fn_inputs["weights"].to_numpy().tolist() == [0.0, 2.5, 2.5]
    assert r.loss_fn_inputs["target_tokens"].to_numpy().tolist() == [2, 3, 4]
    assert r.model_input.to_ints() == [1, 2, 3]
    assert d.loss_fn_inputs["weights"].to_numpy().tolist() == [0.0, 1.0, 1.0]       # the gold datum is untouched
