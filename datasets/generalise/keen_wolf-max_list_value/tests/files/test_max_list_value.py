from keen_wolf.utils import max_list_value


def test_max_list_value():
    assert max_list_value([3, 9, 2]) == 9
    assert max_list_value([5]) == 5


def test_max_list_value_hidden():
    assert max_list_value([1, 2, 3]) == 3
    assert max_list_value([-5, -2]) == -2
    assert max_list_value([7, 7, 1]) == 7
