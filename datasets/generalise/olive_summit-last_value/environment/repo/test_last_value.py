from olive_summit.procs import last_value


def test_last_value():
    assert last_value([1, 2, 3]) == 3
    assert last_value([7]) == 7
