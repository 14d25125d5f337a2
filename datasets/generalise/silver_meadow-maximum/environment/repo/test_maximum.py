from silver_meadow.common import maximum


def test_maximum():
    assert maximum(3, 1) == 3
    assert maximum(1, 2) == 2
