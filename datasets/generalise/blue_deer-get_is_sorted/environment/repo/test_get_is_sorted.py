from blue_deer.core import get_is_sorted


def test_get_is_sorted():
    assert get_is_sorted([1, 2, 3]) == True
    assert get_is_sorted([3, 1]) == False
