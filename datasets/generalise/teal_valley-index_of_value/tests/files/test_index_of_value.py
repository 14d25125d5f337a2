from teal_valley.common import index_of_value


def test_index_of_value():
    assert index_of_value([4, 5, 6], 6) == 2
    assert index_of_value([1, 2], 9) == -1


def test_index_of_value_hidden():
    assert index_of_value([], 1) == -1
    assert index_of_value([7, 8], 7) == 0
    assert index_of_value([3, 3, 4], 4) == 2
