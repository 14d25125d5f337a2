from grand_fox.helpers import compute_fib


def test_compute_fib():
    assert compute_fib(5) == 5
    assert compute_fib(0) == 0


def test_compute_fib_hidden():
    assert compute_fib(1) == 1
    assert compute_fib(2) == 1
    assert compute_fib(7) == 13
