from indigo_valley.shared import compute_perimeter


def test_compute_perimeter():
    assert compute_perimeter(3, 4) == 14
    assert compute_perimeter(0, 0) == 0


def test_compute_perimeter_hidden():
    assert compute_perimeter(1, 1) == 4
    assert compute_perimeter(5, 2) == 14
    assert compute_perimeter(10, 0) == 20
