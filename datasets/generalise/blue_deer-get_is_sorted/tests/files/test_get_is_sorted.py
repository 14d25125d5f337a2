from blue_deer.core import get_is_sorted


def test_get_is_sorted():
    assert get_is_sorted([1, 2, 3]) == True
    assert get_is_sorted([3, 1]) == False


def test_get_is_sorted_hidden():
    assert get_is_sorted([]) == True
    assert get_is_sorted([5, 5, 6]) == True
    assert get_is_sorted([1, 3, 2]) == False
