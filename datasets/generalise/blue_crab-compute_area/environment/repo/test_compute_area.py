from blue_crab.core import compute_area


def test_compute_area():
    assert compute_area(3, 4) == 12
    assert compute_area(2, 2) == 4
