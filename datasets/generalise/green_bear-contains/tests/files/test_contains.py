from green_bear.funcs import contains


def test_contains():
    assert contains([1, 2, 3], 2) == True
    assert contains([1, 2, 3], 5) == False


def test_contains_hidden():
    assert contains([], 1) == False
    assert contains(['a'], 'a') == True
    assert contains([4, 5], 6) == False
