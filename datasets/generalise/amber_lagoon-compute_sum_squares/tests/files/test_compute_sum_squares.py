from amber_lagoon.procs import compute_sum_squares


def test_compute_sum_squares():
    assert compute_sum_squares(3, 4) == 25
    assert compute_sum_squares(0, 0) == 0


def test_compute_sum_squares_hidden():
    assert compute_sum_squares(1, 2) == 5
    assert compute_sum_squares(2, 2) == 8
    assert compute_sum_squares(5, 0) == 25
