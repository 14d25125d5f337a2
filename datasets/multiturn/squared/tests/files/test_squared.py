from algebra.squared import squared


def test_squared():
    assert squared(3) == 9
    assert squared(0) == 0


def test_squared_hidden():
    assert squared(4) == 16
    assert squared(-5) == 25
    assert squared(1) == 1
