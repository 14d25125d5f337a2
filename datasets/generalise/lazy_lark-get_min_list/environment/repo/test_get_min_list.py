from lazy_lark.core import get_min_list


def test_get_min_list():
    assert get_min_list([3, 9, 2]) == 2
    assert get_min_list([5]) == 5
