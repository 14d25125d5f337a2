from fresh_lynx.lib import compute_contains


def test_compute_contains():
    assert compute_contains([1, 2, 3], 2) == True
    assert compute_contains([1, 2, 3], 5) == False


def test_compute_contains_hidden():
    assert compute_contains([], 1) == False
    assert compute_contains(['a'], 'a') == True
    assert compute_contains([4, 5], 6) == False
