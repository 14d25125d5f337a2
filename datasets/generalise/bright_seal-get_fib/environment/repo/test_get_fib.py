from bright_seal.ops import get_fib


def test_get_fib():
    assert get_fib(5) == 5
    assert get_fib(0) == 0
