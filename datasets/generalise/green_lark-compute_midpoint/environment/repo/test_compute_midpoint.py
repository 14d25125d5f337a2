from green_lark.helpers import compute_midpoint


def test_compute_midpoint():
    assert compute_midpoint(2, 4) == 3
    assert compute_midpoint(0, 0) == 0
