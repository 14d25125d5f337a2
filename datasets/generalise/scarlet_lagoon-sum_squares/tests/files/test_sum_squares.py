from scarlet_lagoon.calc import sum_squares


def test_sum_squares():
    assert sum_squares(3, 4) == 25
    assert sum_squares(0, 0) == 0


def test_sum_squares_hidden():
    assert sum_squares(1, 2) == 5
    assert sum_squares(2, 2) == 8
    assert sum_squares(5, 0) == 25
