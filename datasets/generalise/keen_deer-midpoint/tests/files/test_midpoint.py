from keen_deer.utils import midpoint


def test_midpoint():
    assert midpoint(2, 4) == 3
    assert midpoint(0, 0) == 0


def test_midpoint_hidden():
    assert midpoint(1, 2) == 1.5
    assert midpoint(-4, 4) == 0
    assert midpoint(10, 20) == 15
