from quick_kiwi.utils import compute_factorial


def test_compute_factorial():
    assert compute_factorial(4) == 24
    assert compute_factorial(0) == 1


def test_compute_factorial_hidden():
    assert compute_factorial(1) == 1
    assert compute_factorial(3) == 6
    assert compute_factorial(5) == 120
