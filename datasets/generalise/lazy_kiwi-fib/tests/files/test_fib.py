from lazy_kiwi.utils import fib


def test_fib():
    assert fib(5) == 5
    assert fib(0) == 0


def test_fib_hidden():
    assert fib(1) == 1
    assert fib(2) == 1
    assert fib(7) == 13
