from totals.add_up import add_up


def test_add_up():
    assert add_up([1, 2, 3]) == 6
    assert add_up([]) == 0
