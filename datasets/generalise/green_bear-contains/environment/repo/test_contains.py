from green_bear.funcs import contains


def test_contains():
    assert contains([1, 2, 3], 2) == True
    assert contains([1, 2, 3], 5) == False
