from olive_valley.calc import get_maximum


def test_get_maximum():
    assert get_maximum(3, 1) == 3
    assert get_maximum(1, 2) == 2
