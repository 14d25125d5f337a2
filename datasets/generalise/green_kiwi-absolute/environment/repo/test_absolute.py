from green_kiwi.core import absolute


def test_absolute():
    assert absolute(-3) == 3
    assert absolute(2) == 2
