from scarlet_summit.calc import compute_last


def test_compute_last():
    assert compute_last([1, 2, 3]) == 3
    assert compute_last([7]) == 7


def test_compute_last_hidden():
    assert compute_last([4, 5]) == 5
    assert compute_last(['a', 'b', 'c']) == 'c'
    assert compute_last([9, 8, 1]) == 1
