from green_kiwi.core import absolute


def test_absolute():
    assert absolute(-3) == 3
    assert absolute(2) == 2


def test_absolute_hidden():
    assert absolute(0) == 0
    assert absolute(-7) == 7
    assert absolute(5) == 5
