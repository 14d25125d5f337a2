from ivory_river.calc import sum_list_value


def test_sum_list_value():
    assert sum_list_value([1, 2, 3]) == 6
    assert sum_list_value([]) == 0


def test_sum_list_value_hidden():
    assert sum_list_value([5]) == 5
    assert sum_list_value([-1, 1, 4]) == 4
    assert sum_list_value([10, 20]) == 30
