from noble_fox.misc import average_value


def test_average_value():
    assert average_value([2, 4]) == 3
    assert average_value([5]) == 5


def test_average_value_hidden():
    assert average_value([1, 2, 3]) == 2
    assert average_value([10, 20, 30, 40]) == 25
    assert average_value([-2, 2]) == 0
