from blue_seal.funcs import gcd_value


def test_gcd_value():
    assert gcd_value(12, 8) == 4
    assert gcd_value(7, 3) == 1


def test_gcd_value_hidden():
    assert gcd_value(10, 5) == 5
    assert gcd_value(9, 6) == 3
    assert gcd_value(5, 0) == 5
