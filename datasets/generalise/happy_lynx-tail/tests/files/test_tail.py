from happy_lynx.funcs import tail


def test_tail():
    assert tail([1, 2, 3, 4], 1) == [4]
    assert tail([5, 6], 2) == [5, 6]


def test_tail_hidden():
    assert tail([1, 2, 3], 2) == [2, 3]
    assert tail([9], 1) == [9]
    assert tail([1, 2, 3, 4, 5], 3) == [3, 4, 5]
