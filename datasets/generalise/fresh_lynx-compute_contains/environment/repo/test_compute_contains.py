from fresh_lynx.lib import compute_contains


def test_compute_contains():
    assert compute_contains([1, 2, 3], 2) == True
    assert compute_contains([1, 2, 3], 5) == False
