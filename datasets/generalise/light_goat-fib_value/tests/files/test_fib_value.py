from light_goat.core import fib_value


def test_fib_value():
    assert fib_value(5) == 5
    assert fib_value(0) == 0


def test_fib_value_hidden():
    assert fib_value(1) == 1
    assert fib_value(2) == 1
    assert fib_value(7) == 13
