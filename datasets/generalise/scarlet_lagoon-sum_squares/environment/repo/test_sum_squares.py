from scarlet_lagoon.calc import sum_squares


def test_sum_squares():
    assert sum_squares(3, 4) == 25
    assert sum_squares(0, 0) == 0
