from keen_deer.utils import midpoint


def test_midpoint():
    assert midpoint(2, 4) == 3
    assert midpoint(0, 0) == 0
