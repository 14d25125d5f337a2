from light_fox.tools import absolute_value


def test_absolute_value():
    assert absolute_value(-3) == 3
    assert absolute_value(2) == 2


def test_absolute_value_hidden():
    assert absolute_value(0) == 0
    assert absolute_value(-7) == 7
    assert absolute_value(5) == 5
