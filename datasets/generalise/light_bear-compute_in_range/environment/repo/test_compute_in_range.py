from light_bear.tools import compute_in_range


def test_compute_in_range():
    assert compute_in_range(0, 0, 5) == True
    assert compute_in_range(5, 0, 5) == False
