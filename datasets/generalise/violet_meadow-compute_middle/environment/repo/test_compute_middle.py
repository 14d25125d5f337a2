from violet_meadow.calc import compute_middle


def test_compute_middle():
    assert compute_middle([1, 2, 3]) == 2
    assert compute_middle([7]) == 7
