from lazy_bear.ops import compute_absolute


def test_compute_absolute():
    assert compute_absolute(-3) == 3
    assert compute_absolute(2) == 2
