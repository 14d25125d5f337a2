from blue_hawk.funcs import discount_value


def test_discount_value():
    assert discount_value(200, 10) == 180
    assert discount_value(50, 0) == 50
