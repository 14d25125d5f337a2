from indigo_lagoon.support import get_middle


def test_get_middle():
    assert get_middle([1, 2, 3]) == 2
    assert get_middle([7]) == 7
