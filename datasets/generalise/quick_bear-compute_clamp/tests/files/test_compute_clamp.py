from quick_bear.helpers import compute_clamp


def test_compute_clamp():
    assert compute_clamp(2, 0, 3) == 2
    assert compute_clamp(5, 0, 3) == 3


def test_compute_clamp_hidden():
    assert compute_clamp(-1, 0, 3) == 0
    assert compute_clamp(9, 1, 4) == 4
    assert compute_clamp(1, 0, 3) == 1
