from blue_hawk.funcs import discount_value


def test_discount_value():
    assert discount_value(200, 10) == 180
    assert discount_value(50, 0) == 50


def test_discount_value_hidden():
    assert discount_value(100, 50) == 50
    assert discount_value(80, 25) == 60
    assert discount_value(10, 100) == 0
