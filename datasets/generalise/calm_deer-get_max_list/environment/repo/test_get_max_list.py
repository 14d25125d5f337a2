from calm_deer.helpers import get_max_list


def test_get_max_list():
    assert get_max_list([3, 9, 2]) == 9
    assert get_max_list([5]) == 5
