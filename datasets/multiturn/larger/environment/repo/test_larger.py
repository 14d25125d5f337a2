from ordering.larger import larger


def test_larger():
    assert larger(3, 1) == 3
    assert larger(1, 2) == 2
