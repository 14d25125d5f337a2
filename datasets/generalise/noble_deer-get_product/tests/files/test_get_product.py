from noble_deer.helpers import get_product


def test_get_product():
    assert get_product([2, 3, 4]) == 24
    assert get_product([]) == 1


def test_get_product_hidden():
    assert get_product([5]) == 5
    assert get_product([1, 2, 3]) == 6
    assert get_product([-2, 3]) == -6
