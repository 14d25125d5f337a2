from fresh_crab.misc import compute_count_positive


def test_compute_count_positive():
    assert compute_count_positive([0, 1, -2, 3]) == 2
