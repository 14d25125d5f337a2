from grand_frog.misc import is_sorted


def test_is_sorted():
    assert is_sorted([1, 2, 3]) == True
    assert is_sorted([3, 1]) == False
