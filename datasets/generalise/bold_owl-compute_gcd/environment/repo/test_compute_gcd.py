from bold_owl.tools import compute_gcd


def test_compute_gcd():
    assert compute_gcd(12, 8) == 4
    assert compute_gcd(7, 3) == 1
