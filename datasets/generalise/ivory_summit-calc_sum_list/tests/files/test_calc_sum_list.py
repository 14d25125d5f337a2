from ivory_summit.support import calc_sum_list


def test_calc_sum_list():
    assert calc_sum_list([1, 2, 3]) == 6
    assert calc_sum_list([]) == 0


def test_calc_sum_list_hidden():
    assert calc_sum_list([5]) == 5
    assert calc_sum_list([-1, 1, 4]) == 4
    assert calc_sum_list([10, 20]) == 30
