from silver_valley.procs import calc_squares


def test_calc_squares():
    assert calc_squares(3) == [0, 1, 4]
    assert calc_squares(0) == []
