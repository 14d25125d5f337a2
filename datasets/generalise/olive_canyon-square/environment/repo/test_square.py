from olive_canyon.calc import square


def test_square():
    assert square(3) == 9
    assert square(0) == 0
