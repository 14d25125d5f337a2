from red_hawk.tools import compute_discount


def test_compute_discount():
    assert compute_discount(200, 10) == 180
    assert compute_discount(50, 0) == 50


def test_compute_discount_hidden():
    assert compute_discount(100, 50) == 50
    assert compute_discount(80, 25) == 60
    assert compute_discount(10, 100) == 0
