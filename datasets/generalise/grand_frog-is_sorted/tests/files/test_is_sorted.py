from grand_frog.misc import is_sorted


def test_is_sorted():
    assert is_sorted([1, 2, 3]) == True
    assert is_sorted([3, 1]) == False


def test_is_sorted_hidden():
    assert is_sorted([]) == True
    assert is_sorted([5, 5, 6]) == True
    assert is_sorted([1, 3, 2]) == False
