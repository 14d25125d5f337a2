from light_goat.core import fib_value


def test_fib_value():
    assert fib_value(5) == 5
    assert fib_value(0) == 0
