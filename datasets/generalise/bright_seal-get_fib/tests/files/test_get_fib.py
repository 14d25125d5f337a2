from bright_seal.ops import get_fib


def test_get_fib():
    assert get_fib(5) == 5
    assert get_fib(0) == 0


def test_get_fib_hidden():
    assert get_fib(1) == 1
    assert get_fib(2) == 1
    assert get_fib(7) == 13
