from green_hawk.utils import compute_evens


def test_compute_evens():
    assert compute_evens([1, 2, 3, 4]) == [2, 4]
