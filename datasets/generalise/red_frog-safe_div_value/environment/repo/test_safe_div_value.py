from red_frog.misc import safe_div_value


def test_safe_div_value():
    assert safe_div_value(7, 2) == 3.5
    assert safe_div_value(1, 0) == 0
