from copper_harbor.support import get_last


def test_get_last():
    assert get_last([1, 2, 3]) == 3
    assert get_last([7]) == 7
