from calm_deer.helpers import get_max_list


def test_get_max_list():
    assert get_max_list([3, 9, 2]) == 9
    assert get_max_list([5]) == 5


def test_get_max_list_hidden():
    assert get_max_list([1, 2, 3]) == 3
    assert get_max_list([-5, -2]) == -2
    assert get_max_list([7, 7, 1]) == 7
