from quick_bear.helpers import compute_clamp


def test_compute_clamp():
    assert compute_clamp(2, 0, 3) == 2
    assert compute_clamp(5, 0, 3) == 3
