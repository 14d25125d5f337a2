from fresh_mole.misc import tail_value


def test_tail_value():
    assert tail_value([1, 2, 3, 4], 1) == [4]
    assert tail_value([5, 6], 2) == [5, 6]


def test_tail_value_hidden():
    assert tail_value([1, 2, 3], 2) == [2, 3]
    assert tail_value([9], 1) == [9]
    assert tail_value([1, 2, 3, 4, 5], 3) == [3, 4, 5]
