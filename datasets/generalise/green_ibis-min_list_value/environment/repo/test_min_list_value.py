from green_ibis.helpers import min_list_value


def test_min_list_value():
    assert min_list_value([3, 9, 2]) == 2
    assert min_list_value([5]) == 5
