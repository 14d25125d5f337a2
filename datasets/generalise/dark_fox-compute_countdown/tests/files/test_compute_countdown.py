from dark_fox.ops import compute_countdown


def test_compute_countdown():
    assert compute_countdown(3) == [3, 2, 1]
    assert compute_countdown(1) == [1]


def test_compute_countdown_hidden():
    assert compute_countdown(0) == []
    assert compute_countdown(2) == [2, 1]
    assert compute_countdown(5) == [5, 4, 3, 2, 1]
