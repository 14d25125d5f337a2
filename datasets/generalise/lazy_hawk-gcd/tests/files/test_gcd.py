from lazy_hawk.ops import gcd


def test_gcd():
    assert gcd(12, 8) == 4
    assert gcd(7, 3) == 1


def test_gcd_hidden():
    assert gcd(10, 5) == 5
    assert gcd(9, 6) == 3
    assert gcd(5, 0) == 5
