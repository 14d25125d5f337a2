from lazy_lark.core import get_min_list


def test_get_min_list():
    assert get_min_list([3, 9, 2]) == 2
    assert get_min_list([5]) == 5


def test_get_min_list_hidden():
    assert get_min_list([4, 6, 8]) == 4
    assert get_min_list([-5, -2]) == -5
    assert get_min_list([7, 1, 9]) == 1
