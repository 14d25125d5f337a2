from grand_hawk.funcs import get_absolute


def test_get_absolute():
    assert get_absolute(-3) == 3
    assert get_absolute(2) == 2
