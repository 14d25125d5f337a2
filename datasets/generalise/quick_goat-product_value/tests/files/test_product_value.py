from quick_goat.utils import product_value


def test_product_value():
    assert product_value([2, 3, 4]) == 24
    assert product_value([]) == 1


def test_product_value_hidden():
    assert product_value([5]) == 5
    assert product_value([1, 2, 3]) == 6
    assert product_value([-2, 3]) == -6
