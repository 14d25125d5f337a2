from silver_meadow.common import maximum


def test_maximum():
    assert maximum(3, 1) == 3
    assert maximum(1, 2) == 2


def test_maximum_hidden():
    assert maximum(5, 9) == 9
    assert maximum(-1, -4) == -1
    assert maximum(2, 2) == 2
