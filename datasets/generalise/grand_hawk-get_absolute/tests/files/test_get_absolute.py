from grand_hawk.funcs import get_absolute


def test_get_absolute():
    assert get_absolute(-3) == 3
    assert get_absolute(2) == 2


def test_get_absolute_hidden():
    assert get_absolute(0) == 0
    assert get_absolute(-7) == 7
    assert get_absolute(5) == 5
