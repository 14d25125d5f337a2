from teal_valley.common import index_of_value


def test_index_of_value():
    assert index_of_value([4, 5, 6], 6) == 2
    assert index_of_value([1, 2], 9) == -1
