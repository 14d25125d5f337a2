from indigo_island.base import compute_squares


def test_compute_squares():
    assert compute_squares(3) == [0, 1, 4]
    assert compute_squares(0) == []


def test_compute_squares_hidden():
    assert compute_squares(1) == [0]
    assert compute_squares(2) == [0, 1]
    assert compute_squares(4) == [0, 1, 4, 9]
