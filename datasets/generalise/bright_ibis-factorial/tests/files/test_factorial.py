from bright_ibis.misc import factorial


def test_factorial():
    assert factorial(4) == 24
    assert factorial(0) == 1


def test_factorial_hidden():
    assert factorial(1) == 1
    assert factorial(3) == 6
    assert factorial(5) == 120
