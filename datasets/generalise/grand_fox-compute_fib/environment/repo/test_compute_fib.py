from grand_fox.helpers import compute_fib


def test_compute_fib():
    assert compute_fib(5) == 5
    assert compute_fib(0) == 0
