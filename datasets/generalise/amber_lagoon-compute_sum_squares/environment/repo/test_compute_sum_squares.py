from amber_lagoon.procs import compute_sum_squares


def test_compute_sum_squares():
    assert compute_sum_squares(3, 4) == 25
    assert compute_sum_squares(0, 0) == 0
