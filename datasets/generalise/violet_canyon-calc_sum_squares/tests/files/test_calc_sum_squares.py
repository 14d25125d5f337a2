from violet_canyon.kernel import calc_sum_squares


def test_calc_sum_squares():
    assert calc_sum_squares(3, 4) == 25
    assert calc_sum_squares(0, 0) == 0


def test_calc_sum_squares_hidden():
    assert calc_sum_squares(1, 2) == 5
    assert calc_sum_squares(2, 2) == 8
    assert calc_sum_squares(5, 0) == 25
