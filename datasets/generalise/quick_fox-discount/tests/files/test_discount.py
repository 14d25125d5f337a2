from quick_fox.ops import discount


def test_discount():
    assert discount(200, 10) == 180
    assert discount(50, 0) == 50


def test_discount_hidden():
    assert discount(100, 50) == 50
    assert discount(80, 25) == 60
    assert discount(10, 100) == 0
