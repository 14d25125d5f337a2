from fresh_crab.misc import compute_count_positive


def test_compute_count_positive():
    assert compute_count_positive([0, 1, -2, 3]) == 2


def test_compute_count_positive_hidden():
    assert compute_count_positive([]) == 0
    assert compute_count_positive([5, 6]) == 2
    assert compute_count_positive([0, 0, 1]) == 1
