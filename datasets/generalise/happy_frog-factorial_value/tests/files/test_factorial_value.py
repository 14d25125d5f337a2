from happy_frog.helpers import factorial_value


def test_factorial_value():
    assert factorial_value(4) == 24
    assert factorial_value(0) == 1


def test_factorial_value_hidden():
    assert factorial_value(1) == 1
    assert factorial_value(3) == 6
    assert factorial_value(5) == 120
