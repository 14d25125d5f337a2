from noble_frog.funcs import safe_div


def test_safe_div():
    assert safe_div(7, 2) == 3.5
    assert safe_div(1, 0) == 0
