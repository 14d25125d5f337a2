from ivory_river.calc import sum_list_value


def test_sum_list_value():
    assert sum_list_value([1, 2, 3]) == 6
    assert sum_list_value([]) == 0
