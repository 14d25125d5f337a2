from noble_frog.funcs import safe_div


def test_safe_div():
    assert safe_div(7, 2) == 3.5
    assert safe_div(1, 0) == 0


def test_safe_div_hidden():
    assert safe_div(9, 3) == 3
    assert safe_div(1, 4) == 0.25
    assert safe_div(5, 2) == 2.5
