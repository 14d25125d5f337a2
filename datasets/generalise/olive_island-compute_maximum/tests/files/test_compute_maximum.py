from olive_island.base import compute_maximum


def test_compute_maximum():
    assert compute_maximum(3, 1) == 3
    assert compute_maximum(1, 2) == 2


def test_compute_maximum_hidden():
    assert compute_maximum(5, 9) == 9
    assert compute_maximum(-1, -4) == -1
    assert compute_maximum(2, 2) == 2
