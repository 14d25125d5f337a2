from teal_lagoon.base import get_index_of


def test_get_index_of():
    assert get_index_of([4, 5, 6], 6) == 2
    assert get_index_of([1, 2], 9) == -1
