from violet_meadow.calc import compute_middle


def test_compute_middle():
    assert compute_middle([1, 2, 3]) == 2
    assert compute_middle([7]) == 7


def test_compute_middle_hidden():
    assert compute_middle([4, 5, 6, 7, 8]) == 6
    assert compute_middle(['a', 'b', 'c']) == 'b'
    assert compute_middle([9, 1]) == 1
