from blue_seal.funcs import gcd_value


def test_gcd_value():
    assert gcd_value(12, 8) == 4
    assert gcd_value(7, 3) == 1
