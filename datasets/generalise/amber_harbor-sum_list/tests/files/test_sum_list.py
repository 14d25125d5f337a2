from amber_harbor.base import sum_list


def test_sum_list():
    assert sum_list([1, 2, 3]) == 6
    assert sum_list([]) == 0


def test_sum_list_hidden():
    assert sum_list([5]) == 5
    assert sum_list([-1, 1, 4]) == 4
    assert sum_list([10, 20]) == 30
