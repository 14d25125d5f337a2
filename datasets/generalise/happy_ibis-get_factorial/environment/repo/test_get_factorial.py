from happy_ibis.core import get_factorial


def test_get_factorial():
    assert get_factorial(4) == 24
    assert get_factorial(0) == 1
