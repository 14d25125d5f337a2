from indigo_valley.shared import compute_perimeter


def test_compute_perimeter():
    assert compute_perimeter(3, 4) == 14
    assert compute_perimeter(0, 0) == 0
