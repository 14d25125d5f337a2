from blue_crab.core import compute_area


def test_compute_area():
    assert compute_area(3, 4) == 12
    assert compute_area(2, 2) == 4


def test_compute_area_hidden():
    assert compute_area(5, 1) == 5
    assert compute_area(0, 7) == 0
    assert compute_area(6, 3) == 18
