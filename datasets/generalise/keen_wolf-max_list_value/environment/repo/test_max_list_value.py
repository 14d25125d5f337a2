from keen_wolf.utils import max_list_value


def test_max_list_value():
    assert max_list_value([3, 9, 2]) == 9
    assert max_list_value([5]) == 5
