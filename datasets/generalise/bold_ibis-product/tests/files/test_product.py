from bold_ibis.lib import product


def test_product():
    assert product([2, 3, 4]) == 24
    assert product([]) == 1


def test_product_hidden():
    assert product([5]) == 5
    assert product([1, 2, 3]) == 6
    assert product([-2, 3]) == -6
