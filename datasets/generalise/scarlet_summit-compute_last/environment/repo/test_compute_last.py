from scarlet_summit.calc import compute_last


def test_compute_last():
    assert compute_last([1, 2, 3]) == 3
    assert compute_last([7]) == 7
