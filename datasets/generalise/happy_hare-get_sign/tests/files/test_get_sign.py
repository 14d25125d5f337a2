from happy_hare.misc import get_sign


def test_get_sign():
    assert get_sign(-5) == -1
    assert get_sign(4) == 1


def test_get_sign_hidden():
    assert get_sign(0) == 0
    assert get_sign(-1) == -1
    assert get_sign(9) == 1
