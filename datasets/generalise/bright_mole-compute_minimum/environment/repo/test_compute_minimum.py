from bright_mole.tools import compute_minimum


def test_compute_minimum():
    assert compute_minimum(3, 1) == 1
    assert compute_minimum(1, 2) == 1
