from merry_deer.core import midpoint_value


def test_midpoint_value():
    assert midpoint_value(2, 4) == 3
    assert midpoint_value(0, 0) == 0
