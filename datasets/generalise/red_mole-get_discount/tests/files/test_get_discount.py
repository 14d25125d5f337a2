from red_mole.lib import get_discount


def test_get_discount():
    assert get_discount(200, 10) == 180
    assert get_discount(50, 0) == 50


def test_get_discount_hidden():
    assert get_discount(100, 50) == 50
    assert get_discount(80, 25) == 60
    assert get_discount(10, 100) == 0
