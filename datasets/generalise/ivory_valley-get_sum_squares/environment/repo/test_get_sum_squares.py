from ivory_valley.shared import get_sum_squares


def test_get_sum_squares():
    assert get_sum_squares(3, 4) == 25
    assert get_sum_squares(0, 0) == 0
