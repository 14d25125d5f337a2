from scarlet_valley.support import compute_double_all


def test_compute_double_all():
    assert compute_double_all([1, 3]) == [2, 6]
    assert compute_double_all([]) == []


def test_compute_double_all_hidden():
    assert compute_double_all([5]) == [10]
    assert compute_double_all([0, -1]) == [0, -2]
    assert compute_double_all([4, 2]) == [8, 4]
