from indigo_island.base import compute_squares


def test_compute_squares():
    assert compute_squares(3) == [0, 1, 4]
    assert compute_squares(0) == []
