from olive_river.routines import middle


def test_middle():
    assert middle([1, 2, 3]) == 2
    assert middle([7]) == 7
