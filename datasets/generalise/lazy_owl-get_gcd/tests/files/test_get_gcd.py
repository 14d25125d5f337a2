from lazy_owl.lib import get_gcd


def test_get_gcd():
    assert get_gcd(12, 8) == 4
    assert get_gcd(7, 3) == 1


def test_get_gcd_hidden():
    assert get_gcd(10, 5) == 5
    assert get_gcd(9, 6) == 3
    assert get_gcd(5, 0) == 5
