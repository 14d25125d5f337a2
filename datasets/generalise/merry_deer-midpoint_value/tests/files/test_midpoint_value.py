from merry_deer.core import midpoint_value


def test_midpoint_value():
    assert midpoint_value(2, 4) == 3
    assert midpoint_value(0, 0) == 0


def test_midpoint_value_hidden():
    assert midpoint_value(1, 2) == 1.5
    assert midpoint_value(-4, 4) == 0
    assert midpoint_value(10, 20) == 15
