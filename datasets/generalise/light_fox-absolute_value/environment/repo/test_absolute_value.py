from light_fox.tools import absolute_value


def test_absolute_value():
    assert absolute_value(-3) == 3
    assert absolute_value(2) == 2
