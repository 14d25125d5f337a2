from olive_river.routines import middle


def test_middle():
    assert middle([1, 2, 3]) == 2
    assert middle([7]) == 7


def test_middle_hidden():
    assert middle([4, 5, 6, 7, 8]) == 6
    assert middle(['a', 'b', 'c']) == 'b'
    assert middle([9, 1]) == 1
