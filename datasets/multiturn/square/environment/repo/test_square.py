from powers.square import square


def test_square():
    assert square(3) == 9
    assert square(0) == 0
