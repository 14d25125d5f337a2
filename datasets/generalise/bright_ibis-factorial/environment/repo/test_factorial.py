from bright_ibis.misc import factorial


def test_factorial():
    assert factorial(4) == 24
    assert factorial(0) == 1
