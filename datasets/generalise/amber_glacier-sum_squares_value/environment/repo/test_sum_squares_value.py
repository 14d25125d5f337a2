from amber_glacier.support import sum_squares_value


def test_sum_squares_value():
    assert sum_squares_value(3, 4) == 25
    assert sum_squares_value(0, 0) == 0
