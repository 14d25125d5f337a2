from happy_hare.misc import get_sign


def test_get_sign():
    assert get_sign(-5) == -1
    assert get_sign(4) == 1
