from noble_fox.misc import average_value


def test_average_value():
    assert average_value([2, 4]) == 3
    assert average_value([5]) == 5
