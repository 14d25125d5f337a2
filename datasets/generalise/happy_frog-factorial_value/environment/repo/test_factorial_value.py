from happy_frog.helpers import factorial_value


def test_factorial_value():
    assert factorial_value(4) == 24
    assert factorial_value(0) == 1
