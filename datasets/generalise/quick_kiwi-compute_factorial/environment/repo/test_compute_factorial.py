from quick_kiwi.utils import compute_factorial


def test_compute_factorial():
    assert compute_factorial(4) == 24
    assert compute_factorial(0) == 1
