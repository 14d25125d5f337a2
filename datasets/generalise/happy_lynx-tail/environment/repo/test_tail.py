from happy_lynx.funcs import tail


def test_tail():
    assert tail([1, 2, 3, 4], 1) == [4]
    assert tail([5, 6], 2) == [5, 6]
