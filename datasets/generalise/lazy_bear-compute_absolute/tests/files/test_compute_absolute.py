from lazy_bear.ops import compute_absolute


def test_compute_absolute():
    assert compute_absolute(-3) == 3
    assert compute_absolute(2) == 2


def test_compute_absolute_hidden():
    assert compute_absolute(0) == 0
    assert compute_absolute(-7) == 7
    assert compute_absolute(5) == 5
