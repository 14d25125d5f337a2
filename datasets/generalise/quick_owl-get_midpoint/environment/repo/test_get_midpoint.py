from quick_owl.ops import get_midpoint


def test_get_midpoint():
    assert get_midpoint(2, 4) == 3
    assert get_midpoint(0, 0) == 0
