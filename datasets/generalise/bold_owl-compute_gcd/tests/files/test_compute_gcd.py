from bold_owl.tools import compute_gcd


def test_compute_gcd():
    assert compute_gcd(12, 8) == 4
    assert compute_gcd(7, 3) == 1


def test_compute_gcd_hidden():
    assert compute_gcd(10, 5) == 5
    assert compute_gcd(9, 6) == 3
    assert compute_gcd(5, 0) == 5
