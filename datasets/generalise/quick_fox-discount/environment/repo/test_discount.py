from quick_fox.ops import discount


def test_discount():
    assert discount(200, 10) == 180
    assert discount(50, 0) == 50
