"""--lr-schedule: the learning rate of each step (a function of the step only, so --resume continues it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cookbook.rl_loop import lr_at


@pytest.mark.parametrize("schedule,mid,last",
                         [("constant", 1e-3, 1e-3), ("linear", 5e-4, 1e-3 / 40), ("cosine", 5e-4, None)])
def test_lr_schedules(schedule, mid, last):
    a = SimpleNamespace(train=SimpleNamespace(learning_rate=1e-3, num_steps=40, lr_schedule=schedule))
    lrs = [lr_at(a, s) for s in range(40)]
    assert lrs[0] == pytest.approx(1e-3) and lrs[20] == pytest.approx(mid)
    assert all(x >= y for x, y in zip(lrs, lrs[1:])) and min(lrs) > 0
    if last is not None:
        assert lrs[-1] == pytest.approx(last)
    with pytest.raises(KeyError):
        lr_at(SimpleNamespace(train=SimpleNamespace(learning_rate=1e-3, num_steps=40, lr_schedule="step")), 0)
