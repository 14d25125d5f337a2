from quick_owl.ops import get_midpoint


def test_get_midpoint():
    assert get_midpoint(2, 4) == 3
    assert get_midpoint(0, 0) == 0


def test_get_midpoint_hidden():
    assert get_midpoint(1, 2) == 1.5
    assert get_midpoint(-4, 4) == 0
    assert get_midpoint(10, 20) == 15
