from olive_island.base import compute_maximum


def test_compute_maximum():
    assert compute_maximum(3, 1) == 3
    assert compute_maximum(1, 2) == 2
