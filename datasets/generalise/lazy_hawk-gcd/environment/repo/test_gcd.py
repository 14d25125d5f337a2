from lazy_hawk.ops import gcd


def test_gcd():
    assert gcd(12, 8) == 4
    assert gcd(7, 3) == 1
