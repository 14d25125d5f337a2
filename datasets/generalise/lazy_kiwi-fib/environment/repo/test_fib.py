from lazy_kiwi.utils import fib


def test_fib():
    assert fib(5) == 5
    assert fib(0) == 0
