from teal_lagoon.base import get_index_of


def test_get_index_of():
    assert get_index_of([4, 5, 6], 6) == 2
    assert get_index_of([1, 2], 9) == -1


def test_get_index_of_hidden():
    assert get_index_of([], 1) == -1
    assert get_index_of([7, 8], 7) == 0
    assert get_index_of([3, 3, 4], 4) == 2
