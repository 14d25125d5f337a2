from scarlet_valley.support import compute_double_all


def test_compute_double_all():
    assert compute_double_all([1, 3]) == [2, 6]
    assert compute_double_all([]) == []
