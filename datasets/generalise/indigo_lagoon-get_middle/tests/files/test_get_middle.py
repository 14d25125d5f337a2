from indigo_lagoon.support import get_middle


def test_get_middle():
    assert get_middle([1, 2, 3]) == 2
    assert get_middle([7]) == 7


def test_get_middle_hidden():
    assert get_middle([4, 5, 6, 7, 8]) == 6
    assert get_middle(['a', 'b', 'c']) == 'b'
    assert get_middle([9, 1]) == 1
