from silver_valley.procs import calc_squares


def test_calc_squares():
    assert calc_squares(3) == [0, 1, 4]
    assert calc_squares(0) == []


def test_calc_squares_hidden():
    assert calc_squares(1) == [0]
    assert calc_squares(2) == [0, 1]
    assert calc_squares(4) == [0, 1, 4, 9]
