from olive_canyon.calc import square


def test_square():
    assert square(3) == 9
    assert square(0) == 0


def test_square_hidden():
    assert square(4) == 16
    assert square(-5) == 25
    assert square(1) == 1
