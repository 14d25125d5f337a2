from light_bear.tools import compute_in_range


def test_compute_in_range():
    assert compute_in_range(0, 0, 5) == True
    assert compute_in_range(5, 0, 5) == False


def test_compute_in_range_hidden():
    assert compute_in_range(3, 0, 5) == True
    assert compute_in_range(-1, 0, 5) == False
    assert compute_in_range(2, 2, 3) == True
