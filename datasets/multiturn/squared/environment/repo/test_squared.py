from algebra.squared import squared


def test_squared():
    assert squared(3) == 9
    assert squared(0) == 0
