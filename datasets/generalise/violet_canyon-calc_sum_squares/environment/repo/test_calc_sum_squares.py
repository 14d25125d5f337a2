from violet_canyon.kernel import calc_sum_squares


def test_calc_sum_squares():
    assert calc_sum_squares(3, 4) == 25
    assert calc_sum_squares(0, 0) == 0
