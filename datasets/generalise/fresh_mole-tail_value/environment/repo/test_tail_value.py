from fresh_mole.misc import tail_value


def test_tail_value():
    assert tail_value([1, 2, 3, 4], 1) == [4]
    assert tail_value([5, 6], 2) == [5, 6]
