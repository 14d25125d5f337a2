from green_hawk.utils import compute_evens


def test_compute_evens():
    assert compute_evens([1, 2, 3, 4]) == [2, 4]


def test_compute_evens_hidden():
    assert compute_evens([]) == []
    assert compute_evens([5, 7]) == []
    assert compute_evens([0, 6, 9]) == [0, 6]
