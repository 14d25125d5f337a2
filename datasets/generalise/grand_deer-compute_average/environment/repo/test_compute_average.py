from grand_deer.lib import compute_average


def test_compute_average():
    assert compute_average([2, 4]) == 3
    assert compute_average([5]) == 5
