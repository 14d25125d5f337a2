from merry_mole.lib import compute_tail


def test_compute_tail():
    assert compute_tail([1, 2, 3, 4], 1) == [4]
    assert compute_tail([5, 6], 2) == [5, 6]


def test_compute_tail_hidden():
    assert compute_tail([1, 2, 3], 2) == [2, 3]
    assert compute_tail([9], 1) == [9]
    assert compute_tail([1, 2, 3, 4, 5], 3) == [3, 4, 5]
