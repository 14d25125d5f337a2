from teal_island.routines import last


def test_last():
    assert last([1, 2, 3]) == 3
    assert last([7]) == 7


def test_last_hidden():
    assert last([4, 5]) == 5
    assert last(['a', 'b', 'c']) == 'c'
    assert last([9, 8, 1]) == 1
