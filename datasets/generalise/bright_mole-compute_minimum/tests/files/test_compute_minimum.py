from bright_mole.tools import compute_minimum


def test_compute_minimum():
    assert compute_minimum(3, 1) == 1
    assert compute_minimum(1, 2) == 1


def test_compute_minimum_hidden():
    assert compute_minimum(5, 9) == 5
    assert compute_minimum(-1, -4) == -4
    assert compute_minimum(2, 2) == 2
