from olive_summit.procs import last_value


def test_last_value():
    assert last_value([1, 2, 3]) == 3
    assert last_value([7]) == 7


def test_last_value_hidden():
    assert last_value([4, 5]) == 5
    assert last_value(['a', 'b', 'c']) == 'c'
    assert last_value([9, 8, 1]) == 1
