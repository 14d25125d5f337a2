from olive_valley.calc import get_maximum


def test_get_maximum():
    assert get_maximum(3, 1) == 3
    assert get_maximum(1, 2) == 2


def test_get_maximum_hidden():
    assert get_maximum(5, 9) == 9
    assert get_maximum(-1, -4) == -1
    assert get_maximum(2, 2) == 2
