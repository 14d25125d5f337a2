from green_ibis.helpers import min_list_value


def test_min_list_value():
    assert min_list_value([3, 9, 2]) == 2
    assert min_list_value([5]) == 5


def test_min_list_value_hidden():
    assert min_list_value([4, 6, 8]) == 4
    assert min_list_value([-5, -2]) == -5
    assert min_list_value([7, 1, 9]) == 1
