from red_hawk.tools import compute_discount


def test_compute_discount():
    assert compute_discount(200, 10) == 180
    assert compute_discount(50, 0) == 50
