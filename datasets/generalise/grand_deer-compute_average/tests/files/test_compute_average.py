from grand_deer.lib import compute_average


def test_compute_average():
    assert compute_average([2, 4]) == 3
    assert compute_average([5]) == 5


def test_compute_average_hidden():
    assert compute_average([1, 2, 3]) == 2
    assert compute_average([10, 20, 30, 40]) == 25
    assert compute_average([-2, 2]) == 0
