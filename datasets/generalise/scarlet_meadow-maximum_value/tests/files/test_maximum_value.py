from scarlet_meadow.routines import maximum_value


def test_maximum_value():
    assert maximum_value(3, 1) == 3
    assert maximum_value(1, 2) == 2


def test_maximum_value_hidden():
    assert maximum_value(5, 9) == 9
    assert maximum_value(-1, -4) == -1
    assert maximum_value(2, 2) == 2
