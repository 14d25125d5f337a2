from scarlet_meadow.routines import maximum_value


def test_maximum_value():
    assert maximum_value(3, 1) == 3
    assert maximum_value(1, 2) == 2
