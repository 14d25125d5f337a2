from dark_frog.misc import contains_value


def test_contains_value():
    assert contains_value([1, 2, 3], 2) == True
    assert contains_value([1, 2, 3], 5) == False
