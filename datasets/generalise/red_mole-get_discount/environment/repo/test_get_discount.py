from red_mole.lib import get_discount


def test_get_discount():
    assert get_discount(200, 10) == 180
    assert get_discount(50, 0) == 50
