from ivory_lagoon.procs import get_sum_list


def test_get_sum_list():
    assert get_sum_list([1, 2, 3]) == 6
    assert get_sum_list([]) == 0


def test_get_sum_list_hidden():
    assert get_sum_list([5]) == 5
    assert get_sum_list([-1, 1, 4]) == 4
    assert get_sum_list([10, 20]) == 30
