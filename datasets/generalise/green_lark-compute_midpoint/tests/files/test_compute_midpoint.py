from green_lark.helpers import compute_midpoint


def test_compute_midpoint():
    assert compute_midpoint(2, 4) == 3
    assert compute_midpoint(0, 0) == 0


def test_compute_midpoint_hidden():
    assert compute_midpoint(1, 2) == 1.5
    assert compute_midpoint(-4, 4) == 0
    assert compute_midpoint(10, 20) == 15
