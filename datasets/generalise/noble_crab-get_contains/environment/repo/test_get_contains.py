from noble_crab.utils import get_contains


def test_get_contains():
    assert get_contains([1, 2, 3], 2) == True
    assert get_contains([1, 2, 3], 5) == False
