from happy_ibis.core import get_factorial


def test_get_factorial():
    assert get_factorial(4) == 24
    assert get_factorial(0) == 1


def test_get_factorial_hidden():
    assert get_factorial(1) == 1
    assert get_factorial(3) == 6
    assert get_factorial(5) == 120
