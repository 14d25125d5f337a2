from dark_frog.misc import contains_value


def test_contains_value():
    assert contains_value([1, 2, 3], 2) == True
    assert contains_value([1, 2, 3], 5) == False


def test_contains_value_hidden():
    assert contains_value([], 1) == False
    assert contains_value(['a'], 'a') == True
    assert contains_value([4, 5], 6) == False
