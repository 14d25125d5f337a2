from quick_goat.utils import product_value


def test_product_value():
    assert product_value([2, 3, 4]) == 24
    assert product_value([]) == 1
