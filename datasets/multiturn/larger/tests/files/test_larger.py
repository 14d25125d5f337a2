from ordering.larger import larger


def test_larger():
    assert larger(3, 1) == 3
    assert larger(1, 2) == 2


def test_larger_hidden():
    assert larger(5, 9) == 9
    assert larger(-1, -4) == -1
    assert larger(2, 2) == 2
