from copper_harbor.support import get_last


def test_get_last():
    assert get_last([1, 2, 3]) == 3
    assert get_last([7]) == 7


def test_get_last_hidden():
    assert get_last([4, 5]) == 5
    assert get_last(['a', 'b', 'c']) == 'c'
    assert get_last([9, 8, 1]) == 1
