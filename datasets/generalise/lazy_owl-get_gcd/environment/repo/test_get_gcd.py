from lazy_owl.lib import get_gcd


def test_get_gcd():
    assert get_gcd(12, 8) == 4
    assert get_gcd(7, 3) == 1
