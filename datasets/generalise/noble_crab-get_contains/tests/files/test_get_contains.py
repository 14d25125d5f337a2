from noble_crab.utils import get_contains


def test_get_contains():
    assert get_contains([1, 2, 3], 2) == True
    assert get_contains([1, 2, 3], 5) == False


def test_get_contains_hidden():
    assert get_contains([], 1) == False
    assert get_contains(['a'], 'a') == True
    assert get_contains([4, 5], 6) == False
