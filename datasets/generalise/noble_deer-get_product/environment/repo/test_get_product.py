from noble_deer.helpers import get_product


def test_get_product():
    assert get_product([2, 3, 4]) == 24
    assert get_product([]) == 1
