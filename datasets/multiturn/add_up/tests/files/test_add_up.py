from totals.add_up import add_up


def test_add_up():
    assert add_up([1, 2, 3]) == 6
    assert add_up([]) == 0


def test_add_up_hidden():
    assert add_up([5]) == 5
    assert add_up([-1, 1, 4]) == 4
    assert add_up([10, 20]) == 30
